package quorum

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Late undos and later writes. The undo of a failed acquisition on a master
// that answered after the decision is queued when that late reply arrives,
// so it travels behind everything this proxy sent to that master meanwhile.
// If that includes a later acquisition of the same token on the same key (a
// client retrying with a fixed token, a split vote's retry), the undo
// would delete a key that acquisition wrote, perhaps one a granted lock
// counts on; the same goes for a later extension of the token that counted
// the copy the attempt wrote. So a failed acquisition still waiting for
// late replies is registered, and every later acquisition or extension on
// any of its keys marks it superseded on the masters it goes to, unless
// its token is known to differ (another client's SET NX). Its late undo
// there then waits for the later requests' outcomes (supState): it is sent
// if none of them wrote or counted the key, else the key is left to expire
// by its TTL. A later single-key release of the token means the undo is
// not needed (the release deleted what the attempt wrote). Skipping every
// superseded undo instead left the token on the late master until its TTL,
// where it refused every other client's acquisition.
//
// A single-key attempt is registered on its key's slot. Keys share slots;
// each entry carries its key's 64-bit hash, so a later write looks only at
// the entries of its own key (a hash collision only defers or skips an
// undo, which is safe) without touching the others' requests. An attempt
// over several keys is registered on the multi slot with all its keys'
// hashes, and a later request over several keys looks in each key's slot.
//
// The home slot's lock orders the two: a write marks the waiting requests
// before it is submitted, and a late undo checks its mark and submits under
// the lock, so an undo found current is queued before the later write.
type keySlots struct {
	seed maphash.Seed
	// Every acquisition touches its key's slot: few enough slots that the
	// table stays in the CPU's cache, and the hashes in the entries keep
	// the lists that share a slot apart.
	s [1 << 10]keySlot
	// gens counts, per slot (under its lock), the writes dispatched to its
	// keys (supersede): a granted extend's shorter TTL goes to a master
	// that answered after the grant only if none went out since
	// (shorten.go). Kept apart so that a slot stays one cache line.
	gens [1 << 10]uint64
	// multi holds the failed acquisitions over several keys (a script
	// locking KEYS[1..n] at once), and multiHashes each one's keys'
	// hashes (under multi.mu): a later write of any of those keys, alone
	// or with others, must find it. They are rare, so a write looks here
	// only while nmulti says there are some, and their hashes are kept
	// here rather than in every Request.
	multi       keySlot
	multiHashes map[*Request][]uint64
	nmulti      atomic.Int32
}

type keySlot struct {
	mu      sync.Mutex  // protects waiting and their superseded marks, and the slot's gens entry
	waiting []slotEntry // failed acquisitions whose undo waits for late replies
	// inline is waiting's first storage: a slot rarely holds more than a
	// couple, and then the list shares the slot's 64 bytes instead of
	// costing a cache miss of its own on every acquisition of a key.
	inline [2]slotEntry
}

// slotEntry is a registered failed acquisition and its key's hash.
type slotEntry struct {
	h uint64
	r *Request
}

// init takes the key table's seed, so that a keyed request's slot is found
// with the hash Submit took for the key table (ofRequest).
func (k *keySlots) init(seed maphash.Seed) {
	k.seed = seed
	for i := range k.s {
		k.s[i].waiting = k.s[i].inline[:0]
	}
	k.multi.waiting = k.multi.inline[:0]
	k.multiHashes = map[*Request][]uint64{}
}

// of returns key's slot and hash.
func (k *keySlots) of(key []byte) (*keySlot, uint64) {
	h := maphash.Bytes(k.seed, key)
	return &k.s[h%uint64(len(k.s))], h
}

// gen is the write count of the slot of hash h; its lock is held.
func (k *keySlots) gen(h uint64) *uint64 { return &k.gens[h%uint64(len(k.gens))] }

// ofRequest is of(r.slotKey()), without hashing the key again when Submit
// already did: slotKey is r.Key whenever r has one.
func (k *keySlots) ofRequest(r *Request, key []byte) (*keySlot, uint64) {
	if !r.khSet {
		return k.of(key)
	}
	return &k.s[r.kh%uint64(len(k.s))], r.kh
}

// slotKey is the key a single-key request is registered and numbered
// under: its serialization key, or its first undo key; nil for none.
// Requests over several keys (multiKeys) use the multi slot instead. The
// slice must not be written to.
func (r *Request) slotKey() []byte {
	if r.Key != "" {
		// Not converted with []byte(r.Key), which copies the key (and
		// allocates one longer than 32 bytes) on every acquisition's
		// dispatch: callers only read it.
		return unsafe.Slice(unsafe.StringData(r.Key), len(r.Key))
	}
	if len(r.undoKeys) > 0 {
		return r.undoKeys[0]
	}
	return nil
}

// multiKeys returns the keys of a request over several keys: a script
// naming several KEYS and no single lock key, or an acquisition undone on
// several keys; nil for a single-key request.
func (r *Request) multiKeys() [][]byte {
	switch {
	case r.cold != nil && len(r.cold.keys) > 1:
		return r.cold.keys
	case r.Key == "" && len(r.undoKeys) > 1:
		return r.undoKeys
	}
	return nil
}

// remove takes q off the slot and reports whether it was there. s.mu is
// held.
func (s *keySlot) remove(q *Request) bool {
	for i, x := range s.waiting {
		if x.r == q {
			last := len(s.waiting) - 1
			s.waiting[i], s.waiting[last] = s.waiting[last], slotEntry{}
			s.waiting = s.waiting[:last]
			return true
		}
	}
	return false
}

// remove takes q off slot s, whose lock is held.
func (k *keySlots) remove(s *keySlot, q *Request) {
	if s.remove(q) && s == &k.multi {
		delete(k.multiHashes, q)
		k.nmulti.Add(-1)
	}
}

// register records failed acquisition r, some of whose masters are still to
// answer, on its key's slot, or with its keys' hashes on the multi slot.
// r.mu is held.
func (r *Request) register() {
	if r.slot != nil {
		return
	}
	k := &r.e.slots
	if len(r.undoKeys) > 1 { // what it may have written: several keys
		hs := make([]uint64, len(r.undoKeys))
		for i, key := range r.undoKeys {
			_, hs[i] = k.of(key)
		}
		s := &k.multi
		r.slot, r.home = s, s
		s.mu.Lock()
		s.waiting = append(s.waiting, slotEntry{0, r})
		k.multiHashes[r] = hs
		k.nmulti.Add(1)
		s.mu.Unlock()
		return
	}
	key := r.slotKey()
	if key == nil {
		return
	}
	s, h := k.ofRequest(r, key)
	r.slot, r.home = s, s
	s.mu.Lock()
	s.waiting = append(s.waiting, slotEntry{h, r})
	s.mu.Unlock()
}

// deregister removes r from its slot once no master is left to answer.
// r.mu is held.
func (r *Request) deregister() {
	s := r.slot
	if s == nil || r.unresolved() {
		return
	}
	s.mu.Lock()
	if r.sup != nil && r.sup.deferred != 0 {
		// Undos wait for later acquisitions (resolveSups): stay
		// registered, so that yet another one waits with them.
		r.sup.resolved = true
		s.mu.Unlock()
		return
	}
	r.e.slots.remove(s, r)
	s.mu.Unlock()
	r.slot = nil // r.home stays: later writes that marked r still update it there
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
