package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// The undo of a failed acquisition: on every master whose reply shows it
// wrote there, at once, or when a late reply comes (supersede.go decides
// whether a later request of the same token holds it back).

// undo sends the compensating command of a failed acquisition to every
// master that may have applied it. It is queued behind the acquisition on
// each master's ordered pipeline, so it cannot overtake it.
func (r *Request) undo() {
	if r.kind != Acquire || r.undoOp == UndoNone || len(r.undoKeys) == 0 {
		return
	}
	r.undoing = true
	for i := 0; i < r.e.n; i++ {
		r.undoOne(i)
	}
	if r.unresolved() {
		r.register()
	}
}

// undoOne undoes master i's part of a failed acquisition once its reply
// shows that this attempt wrote there. A master still pending (or past its
// deadline, whose reply may still come) is undone when its reply arrives:
// Complete and late call undoOne again. Until then nothing is sent, because
// the key may already have been there with this very token before the
// attempt (a client retrying its own acquisition), and deleting it would
// take a valid lock from its holder. A master whose connection broke with
// the command sent will never say: its key, if this attempt wrote it, expires
// by its TTL (counted as unconfirmed). Either way the undo is queued after
// that master processed the acquisition, so it cannot overtake it.
func (r *Request) undoOne(i int) {
	switch r.state[i] {
	case replied, ignored:
		if !r.created(i) {
			return
		}
	case lost:
		r.e.unconfirmed.Add(1)
		return
	default: // pending, timedOut: wait for the reply; notApplied: nothing there
		return
	}
	if r.undoStale() {
		r.e.unconfirmed.Add(1)
		return
	}
	if r.undoCmd == nil {
		r.undoCmd = r.undoCommand()
	}
	r.e.submitUndo(i, r.undoCmd)
}

// undoStale reports whether an undo of r sent now could find, in place of
// the copy r wrote, a copy of the same token written since by another
// lockproxy: r's copy was written after T0 and lives TTL, so it may have
// expired and the token been granted again (a client retrying with its
// token, as redsync and redis-py's Lock do, through another lockproxy
// behind a load balancer), and the undo, a compare-and-delete of that
// token (or a count taken off), would delete the new grant's copy.
// supersede.go sees only this proxy's later requests. Sent within
// max(TTL/2, TTL - node_timeout) of T0, the undo reaches a copy that is
// still r's unless it is held up on its way for the rest of that TTL, at
// least min(TTL/2, node_timeout). Later, as when this lockproxy or its
// link stalled before the replies were read, the copy is left to expire:
// no one else is granted the lock while it is there, and its client was
// told it does not hold it, as with an undo that is never confirmed.
func (r *Request) undoStale() bool {
	if r.TTL <= 0 {
		return false
	}
	limit := max(r.TTL/2, r.TTL-r.e.cfg.NodeTimeout)
	return time.Duration(batching.Now()-r.t0) >= limit
}

// undoLate is undoOne for a master whose reply or failure came after the
// decision, when the key may have been handed on: the undo would travel
// behind whatever this proxy sent on the key since, so it is sent only if
// that is nothing (supersede.go); otherwise the key is left to its TTL.
func (r *Request) undoLate(i int) {
	defer r.deregister()
	if (r.state[i] != replied && r.state[i] != ignored) || !r.created(i) || r.slot == nil {
		r.undoOne(i) // nothing to send, unconfirmed, or not registered (no later write could meet it)
		return
	}
	r.slot.mu.Lock()
	defer r.slot.mu.Unlock()
	if r.sup != nil && r.sup.superseded&(1<<i) != 0 {
		r.deferUndo(i)
		return
	}
	r.undoOne(i)
}

// applied reports whether master i's reply shows that the acquisition wrote
// there: a yes always does (SET NX answers OK only when it set the key); an
// error reply or a nil of SET NX never does; another reply of a script that
// refuses before writing (NoIsNoop) neither. Other replies of custom
// acquire scripts may follow a write, and are undone.
func (r *Request) applied(i int) bool {
	rep := r.replyAt(i)
	switch {
	case r.yesAt(i):
		return true
	case r.mayBeSpecial() && r.chk != nil && r.rule != nil && r.rule.IsYes(&rep, r.nkeys):
		return true // the script's yes, not counted by the check: it wrote all the same
	case rep.Type == resp.Error:
		return false
	case r.nilIsNoop && rep.Type == resp.Nil:
		return false
	case r.noIsNoop:
		return false
	}
	return true
}
