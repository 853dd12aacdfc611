//go:build unix

package compat

import (
	"os"
	"syscall"
)

// lockFileExclusive takes an exclusive advisory lock on f, waiting for it.
func lockFileExclusive(f *os.File) (unlock func(), err error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
