//go:build !linux

package evloop

import (
	"log/slog"
	"os"
	"runtime/debug"
	"syscall"
	"time"
)

// Supported reports whether this platform has descriptors on the event
// loop (epoll). Elsewhere the loop still runs tasks, posted functions and
// alarms, but connections read and write in goroutines of their own, which
// hand their bytes to the loop.
const Supported = false

const (
	Readable = 1
	Writable = 4
	Hangup   = 16
	Error    = 8
)

// Loop runs tasks, posted functions and alarms on one goroutine.
type Loop struct {
	shared
	alarms []*Alarm
	later  []func() // Later: for the next iteration
	log    *slog.Logger
	quit   bool
	wakeCh chan struct{} // cap 1
	done   chan struct{}
}

// Alarm is a Timer's registration: its next deadline on the loop.
type Alarm struct {
	t    Timer
	next int64
}

// At asks for the timer to fire no later than at. Loop only.
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
	l := &Loop{log: log, wakeCh: make(chan struct{}, 1), done: make(chan struct{})}
	go l.run()
	return l, nil
}

func (l *Loop) Add(fd int, h Handler, events uint32) error { return ErrUnsupported }
func (l *Loop) Modify(fd int, events uint32) error         { return ErrUnsupported }
func (l *Loop) Remove(fd int)                              {}

// NewAlarm registers t; it fires once a deadline is asked for with At.
func (l *Loop) NewAlarm(t Timer) *Alarm {
	a := &Alarm{t: t, next: Never}
	l.alarms = append(l.alarms, a)
	return a
}

// Close stops the loop and waits for it.
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
}

func (l *Loop) wake() {
	select {
	case l.wakeCh <- struct{}{}:
	default:
	}
}

func (l *Loop) run() {
	defer close(l.done)
	var q queued
	t := time.NewTimer(time.Hour)
	t.Stop()
	for !l.quit {
		next := Never
		for _, a := range l.alarms {
			next = min(next, a.next)
		}
		l.sleeping.Store(true)
		if !l.work.Load() && len(l.later) == 0 {
			var timer <-chan time.Time
			if next != Never {
				t.Reset(time.Duration(next - Now()))
				timer = t.C
			}
			select {
			case <-l.wakeCh:
			case <-timer:
			}
			t.Stop()
		}
		l.sleeping.Store(false)
		ready := l.later
		l.later = nil
		now := Now()
		for _, a := range l.alarms {
			if a.next <= now {
				a.next = Never
				l.fireOne(a, now)
			}
		}
		l.runQueued(&q)
		if len(ready) > 0 {
			l.runLater(ready, &q)
		}
	}
}

func (l *Loop) fireOne(a *Alarm, now int64) {
	defer l.survive()
	a.At(a.t.Fire(now))
}

func (l *Loop) survive() {
	if p := recover(); p != nil {
		l.log.Error("panic on the event loop; it goes on serving the other connections",
			"panic", p, "stack", string(debug.Stack()))
	}
}

func Read(fd int, p []byte) (int, error)  { return 0, ErrUnsupported }
func Write(fd int, p []byte) (int, error) { return 0, ErrUnsupported }

// WritevMax is Writev's bound on buffers per call (loop_linux.go).
const WritevMax = 64

func Writev(fd int, bufs [][]byte) (int, error) { return 0, ErrUnsupported }
func Detach(conn interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}) (int, error) {
	return -1, ErrUnsupported
}

// LimitUnsent does nothing where there is no TCP_NOTSENT_LOWAT to set.
func LimitUnsent(fd, bytes int) error { return nil }
