package pubsub

import (
	"math/bits"
	"time"
)

// A message published by a lock script is published by each master when
// that master runs the script. The first copy to arrive says only that one
// master released the lock: a waiter woken by it and trying again at once
// still finds the lock on the others (those the releasing proxy has not
// reached yet), is refused, and then waits for its own timeout — the
// later copies, which would have told it the lock is free, are the same
// message and dropped. So a new message is held until a quorum of the
// masters on which its subscription is confirmed has sent a copy (then the
// release ran on a quorum, and a retry wins), or until HoldBack after its
// first copy (a release the holder's proxy counted with fewer yes votes,
// masters down or paused), whichever comes first. Messages of one
// subscription are delivered in the order the masters ran the publishes,
// else in the order they were first seen (order.go).
//
// A message delivered on HoldBack short of a quorum of copies may be
// delivered again when its quorum comes (fence.go). Everything here runs
// with h.mu held, the timer's callback included.

// held is a message waiting for its copies.
type held struct {
	m        Message
	need     int   // copies that deliver it
	deadline int64 // on h.dd's clock: delivered then, whatever the count
	ready    bool
	ord      int64    // place in the record's holdq, ascending (order.go)
	seq      []uint64 // per master: its copy's number in what it sent (0: none yet)
}

// upMask is the masters whose subscriber connection is up: each may have
// subscribed a record whose confirmation the hub has not read yet.
func (h *Hub) upMask() uint16 {
	var m uint16
	for i, ms := range h.masters {
		if ms.conn != nil {
			m |= 1 << i
		}
	}
	return m
}

// heldSize is what a held message keeps.
func (h *Hub) heldSize(m *Message) int64 {
	return int64(len(m.Pattern)+len(m.Channel)+len(m.Payload)) + 96 + 8*int64(len(h.masters))
}

// onCopy handles one copy of a message for record r from master i.
func (h *Hub) onCopy(r *record, i int, m Message) {
	e, isNew := h.dd.admit(r, i, h.dd.hash(m.Channel, m.Payload), r.confirmed|h.upMask())
	if !isNew {
		if e != nil {
			h.onOwedCopy(r, i, e, m)
		}
		return
	}
	need := min(h.cfg.Quorum, bits.OnesCount16(r.confirmed|1<<i))
	size := h.heldSize(&m)
	if need <= 1 || e == nil || h.heldBytes+size > h.cfg.MaxHeldBytes {
		h.deliverNext(r, i, m)
		return
	}
	e.got = 1
	e.hold = &held{m: m, need: need, deadline: h.dd.now() + int64(h.cfg.HoldBack)}
	h.enqueue(r, i, e)
	h.holdq = append(h.holdq, e)
	h.heldBytes += size
	h.armHold()
}

// onOwedCopy counts a copy from master i that the dedup recognized as one
// of e's message: it delivers e once it is held and the copies reach its
// quorum, or again, with this copy (the same channel and payload), once
// it went out on HoldBack short of a quorum and this copy, published
// after that, completes it (fence.go).
func (h *Hub) onOwedCopy(r *record, i int, e *entry, m Message) {
	e.got++
	switch {
	case e.hold != nil:
		h.noteCopy(r, i, e) // may move a message i sent before ahead of e
		if !e.hold.ready && e.got >= e.hold.need {
			e.hold.ready = true
		}
		h.flushHeld(r)
	case e.late != nil && e.got >= e.late.need:
		if h.masters[i].pongs >= e.late.fence[i] {
			h.stats.HeldRedelivered++
			h.deliverNext(r, i, m)
		}
		e.late = nil // its quorum came: delivered on it, or read late
	}
}

// deliverNext delivers m, a copy from master i, at once, or behind r's
// held messages, in order.
func (h *Hub) deliverNext(r *record, i int, m Message) {
	if len(r.holdq) == 0 {
		h.fanout(r, m)
		return
	}
	h.enqueue(r, i, &entry{rec: r, hold: &held{m: m, ready: true}})
}

// flushHeld delivers r's held messages from the head while they are
// ready.
func (h *Hub) flushHeld(r *record) {
	for len(r.holdq) > 0 && r.holdq[0].hold.ready {
		e := r.holdq[0]
		r.holdq[0] = nil
		r.holdq = r.holdq[1:]
		h.fanout(r, e.hold.m)
		if e.got < e.hold.need && e.pending != 0 { // on HoldBack: maybe again
			e.late = h.fence(e.pending, e.hold.need)
		}
		h.release(e)
	}
	if len(r.holdq) == 0 {
		r.holdq = nil
	}
}

// release forgets e's held message once delivered or dropped.
func (h *Hub) release(e *entry) {
	if e.hold.need > 0 {
		h.heldBytes -= h.heldSize(&e.hold.m)
	}
	e.hold = nil
}

// dropHeld forgets r's held messages (nobody subscribes to r any more).
func (h *Hub) dropHeld(r *record) {
	for _, e := range r.holdq {
		h.release(e)
	}
	r.holdq, r.last = nil, nil
}

// armHold sets the timer to the earliest deadline of a held message.
func (h *Hub) armHold() {
	for len(h.holdq) > 0 && (h.holdq[0].hold == nil || h.holdq[0].hold.ready) {
		h.holdq[0] = nil
		h.holdq = h.holdq[1:]
	}
	if len(h.holdq) == 0 {
		h.holdq = nil
		return
	}
	d := time.Duration(h.holdq[0].hold.deadline - h.dd.now())
	if h.holdTimer == nil {
		h.holdTimer = time.AfterFunc(d, h.fireHold)
		return
	}
	h.holdTimer.Reset(d)
}

// fireHold delivers the messages whose HoldBack passed with fewer copies
// than a quorum (the timer's callback).
func (h *Hub) fireHold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	now := h.dd.now()
	for len(h.holdq) > 0 {
		e := h.holdq[0]
		if e.hold != nil && !e.hold.ready {
			if e.hold.deadline > now {
				break
			}
			e.hold.ready = true
			h.stats.HeldTimeouts++
			h.flushHeld(e.rec)
		}
		h.holdq[0] = nil
		h.holdq = h.holdq[1:]
	}
	h.armHold()
}
