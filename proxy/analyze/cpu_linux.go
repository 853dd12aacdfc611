//go:build linux

package analyze

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock measures the CPU time of the analysis's own thread: machine
// load does not count against a script, only the work it makes the
// analyzer do. The goroutine stays on its thread until release.
type cpuClock struct{}

func startCPUClock() (cpuClock, func()) {
	runtime.LockOSThread()
	return cpuClock{}, runtime.UnlockOSThread
}

// now is the thread's CPU time so far; ok is false when the OS refused.
func (cpuClock) now() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
