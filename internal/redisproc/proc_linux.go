package redisproc

import "syscall"

// sysProcAttr makes the kernel SIGKILL the server when the process that
// started it dies, so a test binary killed by its timeout leaves no
// redis-server behind. (Strictly, when the OS thread that started it exits;
// Go keeps its threads alive unless a goroutine exits while locked to one
// with runtime.LockOSThread, which callers of Start must not do.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
