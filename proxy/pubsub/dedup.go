package pubsub

import (
	"encoding/binary"
	"hash/maphash"
	"time"
)

// This file recognizes the N copies of one logical message (doc.go has
// the rule and why it holds). Everything here runs with h.mu held.

// entry is one delivered logical message that some masters still owe a
// copy of.
type entry struct {
	rec        *record
	hash       uint64 // of channel and payload
	pending    uint16 // masters whose copy has not arrived (bit i = master i)
	born       int64  // monotonic nanoseconds since the hub's start
	prev, next *entry // the hub-wide list, oldest first
	got        int    // copies arrived (hold.go)
	hold       *held  // not delivered yet (hold.go); nil once delivered
	late       *late  // delivered on HoldBack short of its quorum (fence.go); nil otherwise
}

// dedup holds every entry of the hub in one list ordered by birth, which is
// at once the order of the window's expiry and of eviction when full; each
// record indexes its own entries by hash (record.fifo), oldest first.
type dedup struct {
	head, tail *entry
	n          int
	max        int          // Config.MaxDedupEntries
	window     int64        // Config.DedupWindow in nanoseconds
	start      time.Time    // the clock's origin
	dups       uint64       // copies recognized and dropped
	evicted    uint64       // entries dropped early because the list was full
	unpaid     uint64       // entries that expired with copies still owed
	seed       maphash.Seed // for hash
	scratch    maphash.Hash // reused: admit runs under h.mu
	lenBuf     [8]byte
}

func (d *dedup) init(cfg *Config) {
	d.max = cfg.MaxDedupEntries
	d.window = int64(cfg.DedupWindow)
	d.start = time.Now()
	d.seed = maphash.MakeSeed()
	d.scratch.SetSeed(d.seed)
}

func (d *dedup) now() int64 { return int64(time.Since(d.start)) }

// hash identifies a message within its record. The channel is part of it
// for patterns (one pattern record hears many channels); its length goes
// first so that no channel/payload split is confused with another. 64 bits
// make a collision (which would merge two distinct messages) a chance of
// about n²/2⁶⁵ among n messages within a window: nil for practical n.
func (d *dedup) hash(channel string, payload []byte) uint64 {
	d.scratch.Reset()
	binary.LittleEndian.PutUint64(d.lenBuf[:], uint64(len(channel)))
	d.scratch.Write(d.lenBuf[:])
	d.scratch.WriteString(channel)
	d.scratch.Write(payload)
	return d.scratch.Sum64()
}

// admit decides about a copy of a message, with the given hash, that
// master i delivered for record r: isNew when it is a new logical message,
// false when it is the copy of one already seen. e is the message's entry
// (nil for a new message no other master will send a copy of).
//
// The copy belongs to the oldest remembered message of r with that hash
// that master i still owes, because a master delivers in publish order. If
// i owes none, the copy is a new message; it is remembered as owed by the
// other masters of owe: those on which r is confirmed, and those whose
// confirmation may still be on its way (the master subscribed, and
// publishes, before the hub has read its answer). A master that turns out
// not to send a copy is like one the message was not published on: its
// next copy of the same payload joins this entry, and that message is
// still delivered by the others' copies.
func (d *dedup) admit(r *record, i int, h uint64, owe uint16) (e *entry, isNew bool) {
	now := d.now()
	d.expire(now)
	bit := uint16(1) << i
	for _, e := range r.fifo[h] {
		if e.pending&bit != 0 {
			e.pending &^= bit
			if e.pending == 0 {
				d.drop(e)
			}
			d.dups++
			return e, false
		}
	}
	pending := owe &^ bit
	if pending == 0 {
		return nil, true // nobody else will send a copy: nothing to remember
	}
	if d.n >= d.max {
		d.evicted++
		d.drop(d.head)
	}
	e = &entry{rec: r, hash: h, pending: pending, born: now, prev: d.tail}
	if d.tail != nil {
		d.tail.next = e
	} else {
		d.head = e
	}
	d.tail = e
	d.n++
	if r.fifo == nil {
		r.fifo = map[uint64][]*entry{}
	}
	r.fifo[h] = append(r.fifo[h], e)
	return e, true
}

// expire forgets entries older than the window: a copy that comes later
// is taken for a new message.
func (d *dedup) expire(now int64) {
	for d.head != nil && now-d.head.born > d.window {
		d.unpaid++
		d.drop(d.head)
	}
}

// drop forgets e.
func (d *dedup) drop(e *entry) {
	d.unlink(e)
	q := e.rec.fifo[e.hash]
	for k, x := range q {
		if x == e {
			q = append(q[:k], q[k+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(e.rec.fifo, e.hash)
	} else {
		e.rec.fifo[e.hash] = q
	}
}

func (d *dedup) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		d.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		d.tail = e.prev
	}
	e.prev, e.next = nil, nil
	d.n--
}

// dropRecord forgets the entries of a record nobody subscribes to any
// more.
func (d *dedup) dropRecord(r *record) {
	for _, q := range r.fifo {
		for _, e := range q {
			d.unlink(e)
		}
	}
	r.fifo = nil
}

// masterDown releases master i from every copy it owes: it lost them with
// its connection (a restarted master, or one whose subscription was cut),
// and what it sends once subscribed again is published after. Owing them
// still would make its next message join an old one and be taken for a
// copy.
func (d *dedup) masterDown(i int) {
	bit := uint16(1) << i
	for e := d.head; e != nil; {
		next := e.next
		if e.pending &^= bit; e.pending == 0 {
			d.drop(e)
		}
		e = next
	}
}
