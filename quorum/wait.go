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
	// back counts this connection's requests waiting in the back of a
	// key's queue (keytable.go): while there are any, its other requests
	// do not go ahead of other connections' SET NX, so that its own
	// commands keep their order.
	back atomic.Int32
	// queued counts this connection's requests waiting in keys' queues:
	// they do not count against a key's bound for its own later requests
	// (keytable.go), as a connection's read-ahead already bounds them.
	queued atomic.Int32
	gone   atomic.Bool // Abandon was called
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

// Abandon says that nobody will read the outcomes of w's requests any more
// (the client's connection closed). Those still waiting behind their key
// that change nothing when skipped (reads, acquisitions) are then decided
// without being sent, when their turn comes: a client that pipelined
// thousands of reads on a key and hung up costs the key no round trip for
// them. Requests already sent complete as usual.
func (w *Waiter) Abandon() { w.gone.Store(true) }

// abandoned reports whether Abandon was called; false for nil (requests
// built in tests).
func (w *Waiter) abandoned() bool { return w != nil && w.gone.Load() }

// inBack and backed count w's requests in keys' back queues; a nil w
// (requests built in tests) has none.
func (w *Waiter) inBack() int32 {
	if w == nil {
		return 0
	}
	return w.back.Load()
}

func (w *Waiter) backed(d int32) {
	if w != nil {
		w.back.Add(d)
	}
}

// inQueues and queuedIn count w's requests waiting in keys' queues.
func (w *Waiter) inQueues() int32 {
	if w == nil {
		return 0
	}
	return w.queued.Load()
}

func (w *Waiter) queuedIn(d int32) {
	if w != nil {
		w.queued.Add(d)
	}
}

// Wait blocks until every request submitted on w is decided.
func (e *Engine) Wait(w *Waiter) {
	for w.pending.Load() > 0 {
		<-w.ch
	}
}
