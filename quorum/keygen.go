package quorum

import (
	"bytes"
	"hash/maphash"
	"sync"

	"github.com/lockproxy/lockproxy/internal/resp"
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
// where it refused every other client's acquisition. Keys share slots; each
// entry carries its key's 64-bit hash, so a later write looks only at the
// entries of its own key (a hash collision only defers or skips an undo,
// which is safe) without touching the others' requests.
//
// The slot's lock orders the two: a write marks the waiting requests before
// it is submitted, and a late undo checks its mark and submits under the
// lock, so an undo found current is queued before the later write.
type keySlots struct {
	seed maphash.Seed
	// Every acquisition touches its key's slot: few enough slots that the
	// table stays in the CPU's cache, and the hashes in the entries keep
	// the lists that share a slot apart.
	s [1 << 10]keySlot
}

type keySlot struct {
	mu      sync.Mutex  // protects waiting and their superseded marks
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

func (k *keySlots) init() {
	k.seed = maphash.MakeSeed()
	for i := range k.s {
		k.s[i].waiting = k.s[i].inline[:0]
	}
}

// of returns key's slot and hash.
func (k *keySlots) of(key []byte) (*keySlot, uint64) {
	h := maphash.Bytes(k.seed, key)
	return &k.s[h%uint64(len(k.s))], h
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

// supersede is told of every request dispatched: an acquisition or an
// extension marks the failed acquisitions waiting on its key whose token it
// may write or count, and a release of a known token those whose token it
// deletes.
func (e *Engine) supersede(w *Request) {
	clears := w.kind == Release && w.token != nil
	if !clears && w.kind != Acquire && w.kind != AcquireOrExtend && w.kind != Extend {
		return // neither creates, counts nor deletes a key holding the token
	}
	key := w.slotKey()
	if key == nil {
		return
	}
	sent := ^w.skip & (1<<e.n - 1) // the masters w goes to
	s, h := e.slots.of(key)
	s.mu.Lock()
	for _, en := range s.waiting {
		if en.h != h {
			continue // another key's
		}
		q := en.r
		match := w.token == nil || bytes.Equal(w.token, q.undoToken)
		if clears {
			// Only where the release surely deletes what the failed
			// attempt wrote: one string key, compared with the token.
			match = q.undoOp == UndoDelIfValue && len(q.undoKeys) == 1 &&
				bytes.Equal(q.undoKeys[0], key) && bytes.Equal(w.token, q.undoToken)
		}
		if match {
			q.superseded |= sent
			if q.sup == nil {
				q.sup = &supState{}
			}
			for i := 0; i < e.n; i++ {
				if sent&(1<<i) != 0 {
					q.sup.pending[i]++
				}
			}
			q.ref() // until w's outcome on every master is known
			w.sups = append(w.sups, q)
			w.supLeft = sent
		}
	}
	s.mu.Unlock()
}

// supState is what a failed acquisition knows of the later acquisitions,
// extensions and releases of its token that went to each master. Its late
// undo on a master is sent once every such acquisition is known not to
// have written there (SET NX answered nil, as it must while the failed
// attempt's token is there) and no extension counted it: then the token
// there is the failed attempt's. If one wrote, or may have (no reply), the
// key is left to its TTL. Where a release of the token ran after the
// attempt, the release deleted what it wrote: no undo, which could only
// delete the token written again since (the same client through another
// proxy). Without the wait, a client retrying with its own token — as lock
// libraries do — left its first attempt's token on the slow master until
// the TTL, where it refused every attempt, its own included. Under the
// key's slot.mu.
type supState struct {
	pending  [MaxMasters]int32 // later requests with no outcome there yet
	applied  uint16            // masters where one wrote or counted it, or may have
	cleared  uint16            // masters where a release of the token ran after it
	deferred uint16            // masters where the late undo waits for them
	resolved bool              // no master of the failed attempt is left to answer
}

// deferUndo decides the late undo on master i of r, superseded there:
// now, or once the later acquisitions' outcomes there are known.
// r.mu and r.slot.mu are held.
func (r *Request) deferUndo(i int) {
	bit := uint16(1) << i
	switch {
	case r.sup == nil || r.sup.applied&bit != 0:
		r.e.unconfirmed.Add(1)
	case r.sup.pending[i] > 0:
		if r.undoCmd == nil {
			r.undoCmd = r.undoCommand() // sent later without r.mu
		}
		r.sup.deferred |= bit
	case r.sup.cleared&bit != 0:
		// a later release of the token deleted what this attempt wrote
	default:
		r.undoOne(i) // every later acquisition there wrote nothing
	}
}

// resolveSups tells the failed acquisitions w superseded that w's outcome
// on master i is known. w.mu is held; w's state[i] is final.
func (w *Request) resolveSups(i int) {
	bit := uint16(1) << i
	if len(w.sups) == 0 || w.supLeft&bit == 0 {
		return
	}
	var wrote, cleared bool
	switch w.state[i] {
	case replied, ignored:
		switch w.kind {
		case Extend:
			// An extend that found the token there counts it: the
			// late undo must not delete a copy a granted extend relies on.
			wrote = w.yesFrom[i]
		case Release:
			// It ran after the attempt there, unless it answered an
			// error (NOREPLICAS, a script error…): then it deleted
			// nothing, and the undo is sent as if it had not been.
			cleared = w.replies[i].Type != resp.Error
		default:
			wrote = w.applied(i)
		}
	case notApplied:
	default: // lost: it may have
		wrote = true
	}
	s, _ := w.e.slots.of(w.slotKey())
	s.mu.Lock()
	w.supLeft &^= bit
	for _, q := range w.sups {
		st := q.sup
		if st.pending[i]--; wrote {
			st.applied |= bit
		} else if cleared {
			st.cleared |= bit
		}
		if st.pending[i] > 0 || st.deferred&bit == 0 {
			continue
		}
		st.deferred &^= bit
		switch {
		case st.applied&bit != 0:
			q.e.unconfirmed.Add(1)
		case st.cleared&bit != 0: // the release deleted it
		default:
			q.e.submitUndo(i, q.undoCmd)
		}
		if st.deferred == 0 && st.resolved {
			s.remove(q)
		}
	}
	var done []*Request
	if w.supLeft == 0 {
		done, w.sups = w.sups, nil
	}
	s.mu.Unlock()
	for _, q := range done {
		q.unref()
	}
}

// remove takes q off the slot. s.mu is held.
func (s *keySlot) remove(q *Request) {
	for i, x := range s.waiting {
		if x.r == q {
			last := len(s.waiting) - 1
			s.waiting[i], s.waiting[last] = s.waiting[last], slotEntry{}
			s.waiting = s.waiting[:last]
			return
		}
	}
}

// register records failed acquisition r, some of whose masters are still to
// answer, on its key's slot. r.mu is held.
func (r *Request) register() {
	key := r.slotKey()
	if key == nil || r.slot != nil {
		return
	}
	s, h := r.e.slots.of(key)
	r.slot = s
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
	s.remove(r)
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
