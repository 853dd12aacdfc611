package quorum

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// Late undos and later writes. The undo of a failed acquisition on a master
// that answered after the decision is queued when that late reply arrives,
// so it travels behind everything this proxy sent to that master meanwhile.
// If that includes a later acquisition of the same token on the same key (a
// client retrying with a fixed token, a split vote's retry), the undo
// would delete a key that acquisition wrote, perhaps one a granted lock
// counts on. So a failed acquisition still waiting for late replies is
// registered on its key's slot, and every later acquisition on the key
// marks it superseded on the masters it goes to, unless its token is known
// to differ (another client's SET NX): there the request's late undos are
// not sent, and its key is left to expire by its TTL. Releases and extends
// do not mark it: they create no key, so after them the key holds the
// token only if the failed acquisition wrote it, and its undo is right.
// Skipping that undo left the token on the late master until its TTL,
// where it refused every other client's acquisition. Keys share slots by hash; a collision only skips an
// undo, which is safe.
//
// The slot's lock orders the two: a write marks the waiting requests before
// it is submitted, and a late undo checks its mark and submits under the
// lock, so an undo found current is queued before the later write.
type keySlots struct {
	seed maphash.Seed
	s    [1 << 12]keySlot
}

type keySlot struct {
	mu      sync.Mutex // protects waiting and their superseded marks
	waiting []*Request // failed acquisitions whose undo waits for late replies
}

func (k *keySlots) init() { k.seed = maphash.MakeSeed() }

func (k *keySlots) of(key []byte) *keySlot {
	return &k.s[maphash.Bytes(k.seed, key)%uint64(len(k.s))]
}

// slotKey is the key a request is registered and numbered under: its
// serialization key, or its first undo key; nil for none.
func (r *Request) slotKey() []byte {
	if r.Key != "" {
		return []byte(r.Key) // no copy: the compiler keeps it on the stack
	}
	if len(r.undoKeys) > 0 {
		return r.undoKeys[0]
	}
	return nil
}

// supersede is told of every request dispatched: an acquisition marks the
// failed acquisitions waiting on its key whose token it may write.
func (e *Engine) supersede(w *Request) {
	if w.kind != Acquire && w.kind != AcquireOrExtend {
		return // creates no key holding a token
	}
	key := w.slotKey()
	if key == nil {
		return
	}
	sent := ^w.skip // the masters w goes to
	s := e.slots.of(key)
	s.mu.Lock()
	for _, q := range s.waiting {
		if w.token == nil || bytes.Equal(w.token, q.undoToken) {
			q.superseded |= sent
		}
	}
	s.mu.Unlock()
}

// register records failed acquisition r, some of whose masters are still to
// answer, on its key's slot. r.mu is held.
func (r *Request) register() {
	key := r.slotKey()
	if key == nil || r.slot != nil {
		return
	}
	r.slot = r.e.slots.of(key)
	r.slot.mu.Lock()
	r.slot.waiting = append(r.slot.waiting, r)
	r.slot.mu.Unlock()
}

// deregister removes r from its slot once no master is left to answer.
// r.mu is held.
func (r *Request) deregister() {
	s := r.slot
	if s == nil || r.unresolved() {
		return
	}
	s.mu.Lock()
	for i, q := range s.waiting {
		if q == r {
			last := len(s.waiting) - 1
			s.waiting[i], s.waiting[last] = s.waiting[last], nil
			s.waiting = s.waiting[:last]
			break
		}
	}
	s.mu.Unlock()
	r.slot = nil
}

// unresolved reports whether some master's part of r is still unknown (it
// may still answer). r.mu is held.
func (r *Request) unresolved() bool {
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == pending || r.state[i] == timedOut {
			return true
		}
	}
	return false
}
