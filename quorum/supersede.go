package quorum

import (
	"bytes"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Later writes of a failed acquisition's token, and what they mean for its
// late undo (the record they are found in: keygen.go).

// supersede is told of every request dispatched: an acquisition or an
// extension marks the failed acquisitions waiting on any of its keys whose
// token it may write or count, and a single-key release of a known token
// those whose token it deletes. A request over several keys looks in each
// of its keys' slots; every write also looks in the multi slot while it
// holds failed acquisitions over several keys.
func (e *Engine) supersede(w *Request) {
	clears := w.kind == Release && w.token != nil
	if !clears && w.kind != Acquire && w.kind != AcquireOrExtend && w.kind != Extend {
		return // neither creates, counts nor deletes a key holding the token
	}
	sent := ^w.skip() & (1<<e.n - 1) // the masters w goes to
	keys := w.multiKeys()
	if keys == nil {
		key := w.slotKey()
		if key == nil {
			return
		}
		s, h := e.slots.ofRequest(w, key)
		e.supersedeIn(w, s, h, key, sent, clears)
		if !clears && e.slots.nmulti.Load() > 0 { // releases do not clear them
			e.supersedeMulti(w, []uint64{h}, sent)
		}
		return
	}
	if clears {
		// A release over several keys is not known to delete each
		// one: it marks nothing, and the late undos go as before.
		return
	}
	hs := make([]uint64, len(keys))
	for i, k := range keys {
		var s *keySlot
		s, hs[i] = e.slots.of(k)
		e.supersedeIn(w, s, hs[i], k, sent, false)
	}
	if e.slots.nmulti.Load() > 0 {
		e.supersedeMulti(w, hs, sent)
	}
}

// supersedeIn marks the single-key failed acquisitions of key (hash h)
// waiting in slot s that w supersedes.
func (e *Engine) supersedeIn(w *Request, s *keySlot, h uint64, key []byte, sent uint16, clears bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*e.slots.gen(h)++
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
			e.mark(w, q, sent)
		}
	}
}

// supersedeMulti marks the failed acquisitions over several keys that
// share a key with w (hashes hs) and whose token w may write or count.
// Releases do not clear them (see supersede).
func (e *Engine) supersedeMulti(w *Request, hs []uint64, sent uint16) {
	s := &e.slots.multi
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, en := range s.waiting {
		q := en.r
		if !sharesKey(e.slots.multiHashes[q], hs) {
			continue
		}
		if w.token == nil || bytes.Equal(w.token, q.undoToken) {
			e.mark(w, q, sent)
		}
	}
}

func sharesKey(a, b []uint64) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// mark records that w, going to masters sent, supersedes q there. q's home
// slot's lock is held. w is being dispatched and not shared yet: w.cold
// may be allocated (reqCold).
func (e *Engine) mark(w, q *Request, sent uint16) {
	if q.sup == nil {
		q.sup = &supState{}
	}
	q.sup.superseded |= sent
	for i := 0; i < e.n; i++ {
		if sent&(1<<i) != 0 {
			q.sup.pending[i]++
		}
	}
	q.ref() // until w's outcome on every master is known
	c := w.coldOf()
	c.sups = append(c.sups, q)
	w.supLeft = sent
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
// lock of the failed acquisition's home slot.
type supState struct {
	superseded uint16            // masters (bit i) a later write of the token went to
	pending    [MaxMasters]int32 // later requests with no outcome there yet
	applied    uint16            // masters where one wrote or counted it, or may have
	cleared    uint16            // masters where a release of the token ran after it
	deferred   uint16            // masters where the late undo waits for them
	resolved   bool              // no master of the failed attempt is left to answer
}

// deferUndo decides the late undo on master i of r, superseded there:
// now, or once the later acquisitions' outcomes there are known.
// r.mu and r's home slot's lock (r.slot, while registered) are held.
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
	if w.supLeft&bit == 0 || w.cold == nil || len(w.cold.sups) == 0 { // supLeft first: on the vote's line
		return
	}
	var wrote, cleared bool
	switch w.state[i] {
	case replied, ignored:
		switch w.kind {
		case Extend:
			// An extend that found the token there counts it: the
			// late undo must not delete a copy a granted extend relies on.
			wrote = w.yesAt(i)
		case Release:
			// It ran after the attempt there, unless it answered an
			// error (NOREPLICAS, a script error…): then it deleted
			// nothing, and the undo is sent as if it had not been.
			cleared = w.replyAt(i).Type != resp.Error
		default:
			wrote = w.applied(i)
		}
	case notApplied:
	default: // lost: it may have
		wrote = true
	}
	// Each q is updated under its home slot's lock; w's own fields under
	// w.mu. One slot's lock at a time.
	var s *keySlot
	w.supLeft &^= bit
	for _, q := range w.cold.sups {
		if q.home != s {
			if s != nil {
				s.mu.Unlock()
			}
			s = q.home
			s.mu.Lock()
		}
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
		case st.applied&bit != 0 || q.undoStale():
			q.e.unconfirmed.Add(1)
		case st.cleared&bit != 0: // the release deleted it
		default:
			q.e.submitUndo(i, q.undoCmd)
		}
		if st.deferred == 0 && st.resolved {
			w.e.slots.remove(s, q)
		}
	}
	if s != nil {
		s.mu.Unlock()
	}
	var done []*Request
	if w.supLeft == 0 {
		done, w.cold.sups = w.cold.sups, nil
	}
	for _, q := range done {
		q.unref()
	}
}
