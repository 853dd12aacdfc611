package pubsub

import (
	"cmp"
	"slices"
)

// A client that publishes 10 then 11 (each PUBLISH answered before the
// next, or pipelined on one connection) has them in that order on every
// master that ran both, and Redis delivers them to a subscriber in that
// order. The hub cannot order messages by first copy: a master that
// missed 10 (the PUBLISH's deadline passed before it was written there)
// sends 11 as its first copy, which may arrive before any copy of 10, and
// 11 would be delivered first once its quorum came.
//
// What the hub knows is each master's order: a master sends one
// subscription's messages in the order it ran the publishes, so a copy
// from master i of a message that waits (held, or queued behind held
// ones) comes after every waiting message i sent a copy of before. The
// waiting messages of a record (record.holdq, delivered from the head)
// are kept in an order that agrees with every master's: a new message
// goes last (what its master sent before is ahead of it already); when a
// copy from master i of e arrives while the last waiting message i sent,
// x, is behind e, x moves ahead of e, and with it every message between
// them that a master sent before x or before one of those (they must stay
// ahead of x). x is the one out of place: its copies were read late (the
// master that missed it sent the next one first), while those between e
// and x were first seen after e, as the publishes after e are; so they
// stay behind e. Messages no master sent both of keep the order they were
// first seen in, as far as these moves leave it: a message cannot wait
// for an earlier publish the hub has no copy of yet.
//
// Masters can disagree (two clients publishing at once, each master
// running the two publishes in its own order; or two messages of one
// payload that the dedup took one for the other): then e is among those
// that must precede x, no order agrees with both, and x stays where it is.
// Everything here runs with h.mu held.

// enqueue puts e last among r's waiting messages, as the last master i
// sent.
func (h *Hub) enqueue(r *record, i int, e *entry) {
	r.ord++
	e.hold.ord = r.ord
	e.hold.seq = make([]uint64, len(h.masters))
	r.holdq = append(r.holdq, e)
	h.noteCopy(r, i, e)
}

// noteCopy records a copy from master i of e, a waiting message of r, and
// moves the last waiting message i sent before ahead of e, if it is
// behind e.
func (h *Hub) noteCopy(r *record, i int, e *entry) {
	m := h.masters[i]
	m.copies++
	e.hold.seq[i] = m.copies
	if r.last == nil {
		r.last = make([]*entry, len(h.masters))
	}
	x := r.last[i]
	if x == nil || x == e || x.hold == nil || x.hold.ord < e.hold.ord || h.moveAhead(r, x, e) {
		r.last[i] = e
	}
}

// moveAhead moves x, and the messages between e and x that must precede
// it, to just ahead of e, and reports whether it did (not when e must
// precede x too: the masters disagree).
func (h *Hub) moveAhead(r *record, x, e *entry) bool {
	q := r.holdq
	at := func(y *entry) int {
		k, _ := slices.BinarySearchFunc(q, y.hold.ord, func(z *entry, ord int64) int {
			return cmp.Compare(z.hold.ord, ord)
		})
		return k
	}
	seg := q[at(e) : at(x)+1]
	// last[k]: master k's latest copy among the messages that move; one k
	// sent earlier must move too. The messages are visited from x back,
	// in queue order, which agrees with every master's, so one pass finds
	// them all.
	last := slices.Clone(x.hold.seq)
	moved := []*entry{x}
	var stay []*entry
	for k := len(seg) - 2; k >= 0; k-- {
		y := seg[k]
		precedes := false
		for j, s := range y.hold.seq {
			if s != 0 && s < last[j] {
				precedes = true
				break
			}
		}
		if !precedes {
			stay = append(stay, y)
			continue
		}
		if y == e {
			return false
		}
		moved = append(moved, y)
		for j, s := range y.hold.seq {
			last[j] = max(last[j], s)
		}
	}
	slices.Reverse(moved)
	slices.Reverse(stay)
	ords := make([]int64, len(seg))
	for k, y := range seg {
		ords[k] = y.hold.ord
	}
	copy(seg, append(moved, stay...))
	for k, y := range seg {
		y.hold.ord = ords[k]
	}
	return true
}
