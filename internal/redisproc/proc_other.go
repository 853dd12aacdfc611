//go:build !linux

package redisproc

import "syscall"

// sysProcAttr: outside Linux there is no parent-death signal; servers of a
// killed test binary must be stopped by hand.
func sysProcAttr() *syscall.SysProcAttr { return nil }
