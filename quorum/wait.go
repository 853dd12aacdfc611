package quorum

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/batching"
)

// Waiter collects the requests of one client connection's pipeline and
// waits for all of them. One per connection, reused: the connection
// goroutine is the only one that calls Submit, Wait and Reset.
type Waiter struct {
	ch      chan struct{} // cap 1: pending reached zero
	pending atomic.Int32
	reqs    []*Request
	timer   *time.Timer
}

// NewWaiter returns an idle Waiter.
func NewWaiter() *Waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Waiter{ch: make(chan struct{}, 1), timer: t}
}

// Reset forgets the requests of the last Wait.
func (w *Waiter) Reset() {
	clear(w.reqs)
	w.reqs = w.reqs[:0]
}

// poke wakes Wait to look at deadlines again.
func (w *Waiter) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func (w *Waiter) signal() {
	if w.pending.Add(-1) == 0 {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Wait blocks until every submitted request is decided. A request whose
// masters miss its deadline is decided with the votes that arrived: Wait is
// what enforces node_timeout, with one reusable timer per connection.
func (e *Engine) Wait(w *Waiter) {
	for w.pending.Load() > 0 {
		earliest := int64(math.MaxInt64)
		for _, r := range w.reqs {
			if d := r.deadline.Load(); d != 0 && d < earliest && !r.Decided() {
				earliest = d
			}
		}
		if earliest == math.MaxInt64 {
			// Only requests queued behind others on their key: those
			// others' waiters enforce their deadlines and hand over.
			<-w.ch
			continue
		}
		if wait := earliest - batching.Now(); wait > 0 {
			w.timer.Reset(time.Duration(wait))
			select {
			case <-w.ch:
				w.timer.Stop()
				continue
			case <-w.timer.C:
			}
		}
		now := batching.Now()
		for _, r := range w.reqs {
			if d := r.deadline.Load(); d != 0 && d <= now && !r.Decided() {
				r.expire()
			}
		}
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
	mu sync.Mutex // protects m
	m  map[string]*keyQueue
}

// keyQueue is the FIFO of requests waiting for a busy key (the running one
// is not in it).
type keyQueue struct{ head, tail *Request }

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
		s.m[r.Key] = &keyQueue{}
		return true
	}
	if !r.Exclusive {
		// Releases, extends, deletes and reads go ahead of the plain SET
		// NX that other connections queued (concurrent requests, which the
		// proxy may order as it likes): a holder's release must not wait
		// behind a crowd of acquisitions that cannot succeed until it is
		// done. Never ahead of anything its own connection sent earlier:
		// one client's pipeline runs in the order it was sent.
		var prev *Request
		for at := q.head; at != nil; at = at.next {
			if !at.Exclusive || at.w == r.w {
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
	if q == nil || q.head == nil {
		delete(s.m, key)
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
