//go:build unix

package main

import "syscall"

// openFilesLimit is the process's descriptor limit (the soft one, which the
// Go runtime raised to the hard one at start); 0 if it cannot be read or
// is unlimited.
func openFilesLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || uint64(rl.Cur) == ^uint64(0) {
		return 0
	}
	return uint64(rl.Cur)
}
