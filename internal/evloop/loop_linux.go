//go:build linux

package evloop

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
	"unsafe"
)

// Events, as epoll reports them (level-triggered).
const (
	Readable = syscall.EPOLLIN
	Writable = syscall.EPOLLOUT
	Hangup   = syscall.EPOLLHUP | syscall.EPOLLRDHUP
	Error    = syscall.EPOLLERR
)

// Supported reports whether this platform has the event loop.
const Supported = true

// Loop is one event loop on its own OS thread. Methods other than Kick,
// Post and Close must be called on the loop (from a Handler, Task, Timer or
// posted function).
type Loop struct {
	shared
	epfd, evfd int
	handlers   map[int32]Handler
	alarms     []*Alarm
	later      []func() // Later: for the next iteration
	spare      []func() // the last iteration's, emptied
	log        *slog.Logger
	quit       bool
	done       chan struct{}
}

// Alarm is a Timer's registration: its next deadline on the loop.
type Alarm struct {
	t    Timer
	next int64
}

// At asks for the timer to fire no later than at (Now() nanoseconds).
// Loop only.
func (a *Alarm) At(at int64) {
	if at < a.next {
		a.next = at
	}
}

// New starts a loop; log receives the panics it survives (nil: stderr).
func New(log *slog.Logger) (*Loop, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("evloop: epoll_create1: %w", err)
	}
	evfd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		syscall.Close(epfd)
		return nil, fmt.Errorf("evloop: eventfd2: %w", errno)
	}
	l := &Loop{epfd: epfd, evfd: int(evfd), handlers: map[int32]Handler{}, log: log, done: make(chan struct{})}
	ev := syscall.EpollEvent{Events: Readable, Fd: int32(evfd)}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(evfd), &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(int(evfd))
		return nil, fmt.Errorf("evloop: register eventfd: %w", err)
	}
	go l.run()
	return l, nil
}

// Add registers fd (non-blocking) for events, with h to handle them.
func (l *Loop) Add(fd int, h Handler, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("evloop: epoll_ctl add fd %d: %w", fd, err)
	}
	l.handlers[int32(fd)] = h
	return nil
}

// Modify changes the events fd is registered for.
func (l *Loop) Modify(fd int, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, fd, &ev); err != nil {
		return fmt.Errorf("evloop: epoll_ctl mod fd %d: %w", fd, err)
	}
	return nil
}

// Remove unregisters fd; the caller closes it. Events already read for fd
// in this iteration are dropped.
func (l *Loop) Remove(fd int) {
	syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	delete(l.handlers, int32(fd))
}

// NewAlarm registers t; it fires once a deadline is asked for with At.
func (l *Loop) NewAlarm(t Timer) *Alarm {
	a := &Alarm{t: t, next: Never}
	l.alarms = append(l.alarms, a)
	return a
}

// Close stops the loop and waits for it. Registered descriptors are not
// closed: their owners close them first.
func (l *Loop) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return
	}
	l.closed = true
	l.posts = append(l.posts, func() { l.quit = true })
	l.work.Store(true)
	l.wake()
	l.mu.Unlock()
	<-l.done
	syscall.Close(l.epfd)
	syscall.Close(l.evfd)
}

func (l *Loop) wake() {
	one := uint64(1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.evfd), uintptr(unsafe.Pointer(&one)), 8)
}

func (l *Loop) run() {
	// The loop keeps its thread while it runs, and gives it back when it
	// ends: a goroutine that exits while locked makes Go end the thread,
	// and the kernel sends Pdeathsig to every child that thread forked
	// (a test's redis-server, started by whichever goroutine last ran on
	// it, died when an engine was closed).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(l.done)
	events := make([]syscall.EpollEvent, 512)
	var q queued
	for !l.quit {
		timeout := l.timeout()
		if timeout != 0 {
			l.sleeping.Store(true)
			if l.work.Load() {
				timeout = 0
			}
		}
		n := l.wait(events, timeout)
		l.sleeping.Store(false)
		ready := l.later
		l.later = l.spare[:0]
		for i := 0; i < n; i++ {
			fd := events[i].Fd
			if int(fd) == l.evfd {
				var b [8]byte
				syscall.RawSyscall(syscall.SYS_READ, uintptr(l.evfd), uintptr(unsafe.Pointer(&b[0])), 8)
				continue
			}
			if h := l.handlers[fd]; h != nil {
				l.event(h, events[i].Events)
			}
		}
		if len(l.alarms) > 0 {
			l.fire()
		}
		l.runQueued(&q)
		if len(ready) > 0 {
			l.runLater(ready, &q)
		}
		l.spare = ready[:0]
	}
}

func (l *Loop) event(h Handler, ev uint32) {
	defer l.survive()
	h.OnEvent(ev)
}

// survive recovers a panic of a handler, task or timer: the loop serves
// every connection, so one bad request must not stop it. Handlers recover
// themselves where they can clean up (close their connection); this is the
// last resort.
func (l *Loop) survive() {
	if p := recover(); p != nil {
		l.log.Error("panic on the event loop; it goes on serving the other connections",
			"panic", p, "stack", string(debug.Stack()))
	}
}

// timeout is the epoll_wait timeout in ms: 0 when work is queued (Later
// too), -1 when no alarm is set, else until the earliest alarm (rounded
// up).
func (l *Loop) timeout() int {
	if l.work.Load() || len(l.later) > 0 {
		return 0
	}
	next := Never
	for _, a := range l.alarms {
		next = min(next, a.next)
	}
	if next == Never {
		return -1
	}
	d := next - Now()
	if d <= 0 {
		return 0
	}
	ms := (d + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	return int(min(ms, 60_000))
}

func (l *Loop) fire() {
	now := Now()
	for _, a := range l.alarms {
		if a.next <= now {
			a.next = Never
			l.fireOne(a, now)
		}
	}
}

func (l *Loop) fireOne(a *Alarm, now int64) {
	defer l.survive()
	a.At(a.t.Fire(now))
}

// wait is epoll_wait: a raw system call when it does not block (no
// scheduler hand-off), an ordinary one when it may, so that the runtime can
// run other goroutines and stop the world meanwhile.
func (l *Loop) wait(events []syscall.EpollEvent, timeout int) int {
	p := uintptr(unsafe.Pointer(&events[0]))
	var (
		n     uintptr
		errno syscall.Errno
	)
	if timeout == 0 {
		n, _, errno = syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(l.epfd), p, uintptr(len(events)), 0, 0, 0)
	} else {
		n, _, errno = syscall.Syscall6(syscall.SYS_EPOLL_PWAIT, uintptr(l.epfd), p, uintptr(len(events)), uintptr(timeout), 0, 0)
	}
	if errno != 0 {
		if errno != syscall.EINTR {
			l.log.Error("epoll_wait failed; retrying", "err", errno)
			time.Sleep(time.Millisecond)
		}
		return 0
	}
	return int(n)
}

// Read reads from a non-blocking descriptor without the scheduler: n is 0
// with err nil at end of file, err is syscall.EAGAIN when nothing is there.
func Read(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// Write writes to a non-blocking descriptor without the scheduler; a short
// count means the socket buffer is full (err syscall.EAGAIN when nothing
// was written).
func Write(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// WritevMax is how many buffers Writev writes with one call; the rest
// wait for the next (IOV_MAX is 1024; a socket takes far less than that
// many of a connection's pieces at once).
const WritevMax = 64

// Writev writes bufs, in order, with one writev(2) without the scheduler
// (Write's rules): a short count means the socket buffer is full. Empty
// buffers are skipped; past WritevMax non-empty ones, the rest are not
// written by this call.
func Writev(fd int, bufs [][]byte) (int, error) {
	var iov [WritevMax]syscall.Iovec
	n := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if n == len(iov) {
			break
		}
		iov[n].Base = &b[0]
		iov[n].SetLen(len(b))
		n++
	}
	if n == 0 {
		return 0, nil
	}
	for {
		w, _, errno := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(w), nil
	}
}

// Detach takes the socket of a *net.TCPConn (or anything with SyscallConn)
// for the loop: it returns a duplicate of its descriptor, non-blocking, and
// closes conn (the socket stays open through the duplicate). The caller
// owns the descriptor and closes it with syscall.Close.
func Detach(conn interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}) (int, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) {
		fd, dupErr = dupCloexec(int(s))
	}); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, fmt.Errorf("evloop: dup: %w", dupErr)
	}
	conn.Close()
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

func dupCloexec(fd int) (int, error) {
	r, _, errno := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// tcpNotSentLowat is TCP_NOTSENT_LOWAT (Linux 3.12), which package
// syscall does not name.
const tcpNotSentLowat = 25

// LimitUnsent bounds what the kernel takes from writes to the TCP socket fd
// and has not sent yet to about bytes (TCP_NOTSENT_LOWAT): past it, writes
// take no more (EAGAIN) and the socket is not reported writable until the
// peer has taken enough. Bytes sent and not yet acknowledged are not
// counted, so it does not slow a peer that reads; it keeps a peer that
// stops reading from having the kernel queue megabytes (4 MiB on Linux's
// defaults) that its writer rendered for nothing.
func LimitUnsent(fd, bytes int) error {
	return syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, tcpNotSentLowat, bytes)
}
