package quorum

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
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

// keyTable serializes requests per key: at most one quorum attempt per key
// is in flight from this process, so same-key requests arriving together do
// not split the masters' votes among themselves and all fail.
type keyTable struct {
	seed   maphash.Seed
	shards [64]keyShard
}

type keyShard struct {
	mu   sync.Mutex // protects m and free
	m    map[string]*keyQueue
	free []*keyQueue // of keys no longer busy, for reuse
}

// keyQueue is the FIFO of requests waiting for a busy key (the running one
// is not in it). The map's key is key, which the queue owns: the requests'
// Key strings alias their commands, which are recycled with them while the
// key may stay busy with the requests behind.
type keyQueue struct {
	head, tail *Request
	key        []byte
}

// maxFreeQueues bounds each shard's free list.
const maxFreeQueues = 256

func (t *keyTable) init() {
	t.seed = maphash.MakeSeed()
	for i := range t.shards {
		t.shards[i].m = map[string]*keyQueue{}
	}
}

func (t *keyTable) shard(key string) *keyShard {
	return &t.shards[maphash.String(t.seed, key)%uint64(len(t.shards))]
}

// enter marks the key busy for r and returns true, or queues r behind the
// running request and returns false.
func (t *keyTable) enter(r *Request) bool {
	s := t.shard(r.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	q, busy := s.m[r.Key]
	if !busy {
		if n := len(s.free); n > 0 {
			q, s.free = s.free[n-1], s.free[:n-1]
		} else {
			q = &keyQueue{}
		}
		q.key = append(q.key[:0], r.Key...)
		s.m[unsafe.String(unsafe.SliceData(q.key), len(q.key))] = q
		return true
	}
	if !r.exclusive {
		// Releases, extends, deletes and reads go ahead of the plain SET
		// NX that other connections queued (concurrent requests, which the
		// proxy may order as it likes): a holder's release must not wait
		// behind a crowd of acquisitions that cannot succeed until it is
		// done. Never ahead of anything its own connection sent earlier:
		// one client's pipeline runs in the order it was sent.
		var prev *Request
		for at := q.head; at != nil; at = at.next {
			if !at.exclusive || at.w == r.w {
				prev = at
			}
		}
		var at *Request
		if prev == nil {
			at = q.head
		} else {
			at = prev.next
		}
		r.next = at
		if prev == nil {
			q.head = r
		} else {
			prev.next = r
		}
		if at == nil {
			q.tail = r
		}
		return false
	}
	if q.tail == nil {
		q.head = r
	} else {
		q.tail.next = r
	}
	q.tail = r
	return false
}

// leave is called when the running request on key is decided: it returns
// the next one (which now runs), or nil and marks the key free.
func (t *keyTable) leave(key string) *Request {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.m[key]
	if q == nil {
		return nil
	}
	if q.head == nil {
		delete(s.m, key)
		if len(s.free) < maxFreeQueues && cap(q.key) <= 1024 {
			s.free = append(s.free, q)
		}
		return nil
	}
	r := q.head
	q.head = r.next
	if q.head == nil {
		q.tail = nil
	}
	r.next = nil
	return r
}
