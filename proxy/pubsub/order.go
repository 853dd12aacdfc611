package pubsub

import "slices"

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
// x, is behind e, e moves behind x, and with it every message between
// them that a master sent after e or after one of those (they must stay
// behind e). Those between that no master orders after e keep their
// place relative to each other, ahead of e. Messages no master sent both
// of keep the order they were first seen in.
//
// Masters can disagree (two clients publishing at once, each master
// running the two publishes in its own order; or two messages of one
// payload that the dedup took one for the other): then x is among those
// that must follow e, no order agrees with both, and e stays where it is.
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
// moves e behind the last waiting message i sent before, if that is
// behind e.
func (h *Hub) noteCopy(r *record, i int, e *entry) {
	m := h.masters[i]
	m.copies++
	e.hold.seq[i] = m.copies
	if r.last == nil {
		r.last = make([]*entry, len(h.masters))
	}
	x := r.last[i]
	if x == nil || x == e || x.hold == nil || x.hold.ord < e.hold.ord || h.moveBehind(r, e, x) {
		r.last[i] = e
	}
}

// moveBehind moves e, and the messages between e and x that must follow
// it, to just behind x, and reports whether it did (not when x must
// follow e too: the masters disagree).
func (h *Hub) moveBehind(r *record, e, x *entry) bool {
	q := r.holdq
	at := func(y *entry) int {
		k, _ := slices.BinarySearchFunc(q, y.hold.ord, func(z *entry, ord int64) int {
			switch {
			case z.hold.ord < ord:
				return -1
			case z.hold.ord > ord:
				return 1
			}
			return 0
		})
		return k
	}
	seg := q[at(e) : at(x)+1]
	// first[k]: master k's earliest copy among the messages that move;
	// one k sent later must move too. The messages are visited in queue
	// order, which agrees with every master's, so one pass finds them all.
	first := slices.Clone(e.hold.seq)
	moved := []*entry{e}
	var stay []*entry
	for _, y := range seg[1:] {
		follows := false
		for k, s := range y.hold.seq {
			if s != 0 && first[k] != 0 && first[k] < s {
				follows = true
				break
			}
		}
		if !follows {
			stay = append(stay, y)
			continue
		}
		if y == x {
			return false
		}
		moved = append(moved, y)
		for k, s := range y.hold.seq {
			if s != 0 && (first[k] == 0 || s < first[k]) {
				first[k] = s
			}
		}
	}
	ords := make([]int64, len(seg))
	for k, y := range seg {
		ords[k] = y.hold.ord
	}
	copy(seg, append(stay, moved...))
	for k, y := range seg {
		y.hold.ord = ords[k]
	}
	return true
}
