//go:build !linux

package analyze

import "time"

// cpuClock is the wall clock where the thread's CPU time is not read:
// stricter under load, never looser.
type cpuClock struct{ start time.Time }

func startCPUClock() (cpuClock, func()) { return cpuClock{time.Now()}, func() {} }

func (c cpuClock) now() (time.Duration, bool) { return time.Since(c.start), true }
