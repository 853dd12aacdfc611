package quorum

import (
	"sync/atomic"
)

// Waiter counts the undecided requests of one client connection's
// pipeline and tells the connection when the last is decided. Requests may
// be submitted from any goroutine; deadlines are the engine's (deadline.go),
// so a connection only waits.
type Waiter struct {
	ch      chan struct{} // cap 1: pending reached zero
	notify  func()        // instead of ch (NewWaiterFunc)
	pending atomic.Int32
}

// NewWaiter returns an idle Waiter for Wait.
func NewWaiter() *Waiter {
	return &Waiter{ch: make(chan struct{}, 1)}
}

// NewWaiterFunc returns a Waiter that calls notify, from whichever
// goroutine decided the request, when its last pending request is decided:
// for connections on an event loop, which must not block in Wait.
func NewWaiterFunc(notify func()) *Waiter {
	return &Waiter{notify: notify}
}

// Pending is the number of submitted requests not yet decided.
func (w *Waiter) Pending() int { return int(w.pending.Load()) }

// Hold counts one more pending decision that is not a request yet (a
// script being understood before its request is built); Unhold ends it.
func (w *Waiter) Hold()   { w.pending.Add(1) }
func (w *Waiter) Unhold() { w.signal() }

func (w *Waiter) signal() {
	if w.pending.Add(-1) != 0 {
		return
	}
	if w.notify != nil {
		w.notify()
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Wait blocks until every request submitted on w is decided.
func (e *Engine) Wait(w *Waiter) {
	for w.pending.Load() > 0 {
		<-w.ch
	}
}
