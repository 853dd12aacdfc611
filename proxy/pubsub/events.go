package pubsub

import (
	"bytes"
	"math"
	"strconv"
	"time"
)

// This file is lockproxy's own events: what one proxy decided about a key
// (granted, extended, released, signalled), published on every master so
// that every hub — on this proxy and on the others — hands it once to its
// listeners (BLPOP waiters, keyspace notifications). Unlike client
// messages, an event carries an id (the emitting hub's InstanceID and a
// sequence number), so recognizing its copies is exact: the first copy to
// arrive, from any master, is delivered; the others are dropped. It
// survives any number of masters down as long as one that received the
// PUBLISH is connected.

// EventType is what happened to a key, as lockproxy decided it.
type EventType uint8

const (
	EventSet      EventType = iota + 1 // a lock was granted: Key holds a value that expires after TTL
	EventExpire                        // a held lock was extended: it now expires after TTL
	EventDel                           // a lock was released or deleted by a quorum
	EventPush                          // a signal list was pushed: BLPOP waiters on Key may pop
	EventInterest                      // the emitting hub makes keyspace notifications (interest.go); no key
)

// Event is one decision of a proxy about a key.
type Event struct {
	Type   EventType
	Key    string
	TTL    time.Duration // EventSet and EventExpire
	Origin string        // the emitting hub's InstanceID; set by Emit
	Seq    uint64        // its sequence number, from 1; set by Emit
}

// Publisher sends a PUBLISH to every master. The engine's pipelines
// implement it: the command joins the next batch of each master, and the
// call returns without waiting for the replies. A master that misses it
// costs nothing as long as another one delivers the event.
type Publisher interface {
	Publish(channel string, payload []byte)
}

// Emit publishes ev on every master, for the listeners of every hub on the
// master set, and delivers it to this hub's listeners at once (its own
// copies coming back from the masters are then dropped like any other
// duplicate). It must not be called with a lock held that a listener or
// Subscriber.Deliver takes.
func (h *Hub) Emit(ev Event) error {
	if h.cfg.Publisher == nil {
		return ErrNoPublisher
	}
	ev.Origin, ev.Seq = h.cfg.InstanceID, h.seq.Add(1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.deliverEvent(ev)
	h.mu.Unlock()
	h.cfg.Publisher.Publish(h.cfg.EventsChannel, appendEvent(nil, ev))
	return nil
}

type listener struct{ fn func(Event) }

// Listen registers fn for every event, once each, whichever proxy emitted
// it. fn runs with the hub's lock held: it must not block and must not call
// the Hub. stop unregisters it; fn is not called after stop returns.
func (h *Hub) Listen(fn func(Event)) (stop func()) {
	l := &listener{fn}
	h.mu.Lock()
	h.listeners[l] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.listeners, l)
		h.mu.Unlock()
	}
}

// eventWindow is how many sequence numbers are remembered per origin: an
// event more than this far behind the newest one of its origin is taken
// for a copy already delivered (it would be a copy seconds late at any
// rate a proxy emits at). 4096 bits: 512 bytes per origin.
const eventWindow = 4096

// origin is the memory of one emitting hub's events.
type origin struct {
	max  uint64                   // highest sequence number seen
	bits [eventWindow / 64]uint64 // seen sequence numbers, by seq % eventWindow
	used int64                    // when last heard of, for eviction
}

// first records seq and reports whether it is the first time.
func (o *origin) first(seq uint64) bool {
	bit := func(s uint64) (int, uint64) { return int(s % eventWindow / 64), 1 << (s % 64) }
	if seq > o.max {
		if seq-o.max >= eventWindow {
			o.bits = [eventWindow / 64]uint64{}
		} else {
			for s := o.max + 1; s <= seq; s++ {
				w, b := bit(s)
				o.bits[w] &^= b
			}
		}
		o.max = seq
		w, b := bit(seq)
		o.bits[w] |= b
		return true
	}
	if o.max-seq >= eventWindow {
		return false
	}
	w, b := bit(seq)
	if o.bits[w]&b != 0 {
		return false
	}
	o.bits[w] |= b
	return true
}

// deliverEvent hands ev to the listeners and the keyspace notifications
// unless it was delivered before. h.mu is held.
func (h *Hub) deliverEvent(ev Event) {
	o := h.origins[ev.Origin]
	if o == nil {
		if len(h.origins) >= h.cfg.MaxEventOrigins {
			h.evictOrigin()
		}
		o = &origin{}
		h.origins[ev.Origin] = o
	}
	o.used = h.dd.now()
	if !o.first(ev.Seq) {
		h.stats.EventDuplicates++
		return
	}
	if ev.Type == EventInterest {
		h.onInterest(ev)
		return
	}
	h.stats.Events++
	for l := range h.listeners {
		l.fn(ev)
	}
	h.ks.onEvent(h, ev)
}

// evictOrigin forgets the origin heard from least recently: a proxy that
// stopped (origins are per run), most likely.
func (h *Hub) evictOrigin() {
	var oldest string
	var at int64
	for id, o := range h.origins {
		if oldest == "" || o.used < at {
			oldest, at = id, o.used
		}
	}
	delete(h.origins, oldest)
}

// onEventPayload handles an event's copy from a master. h.mu is held.
func (h *Hub) onEventPayload(payload []byte) {
	ev, ok := parseEvent(payload)
	if !ok {
		h.stats.BadEvents++
		return
	}
	h.deliverEvent(ev)
}

// The wire form of an event, text so that an operator's SUBSCRIBE can read
// it: "1 <origin> <seq> <type> <ttl ms> <key>", the key last and
// binary-safe. The leading 1 is the format's version.
func appendEvent(dst []byte, ev Event) []byte {
	dst = append(dst, "1 "...)
	dst = append(dst, ev.Origin...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(ev.Type), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, ev.TTL.Milliseconds(), 10)
	dst = append(dst, ' ')
	return append(dst, ev.Key...)
}

// maxTTLms is the largest TTL in milliseconds a time.Duration holds.
const maxTTLms = math.MaxInt64 / int64(time.Millisecond)

func parseEvent(b []byte) (Event, bool) {
	var f [5][]byte
	for i := range f {
		sp := bytes.IndexByte(b, ' ')
		if sp < 0 {
			return Event{}, false
		}
		f[i], b = b[:sp], b[sp+1:]
	}
	seq, err1 := strconv.ParseUint(string(f[2]), 10, 64)
	typ, err2 := strconv.ParseUint(string(f[3]), 10, 8)
	ttl, err3 := strconv.ParseInt(string(f[4]), 10, 64)
	if string(f[0]) != "1" || len(f[1]) == 0 || err1 != nil || err2 != nil || err3 != nil ||
		seq == 0 || typ < uint64(EventSet) || typ > uint64(EventInterest) || ttl < 0 || ttl > maxTTLms {
		return Event{}, false
	}
	return Event{Type: EventType(typ), Key: string(b), TTL: time.Duration(ttl) * time.Millisecond,
		Origin: string(f[1]), Seq: seq}, true
}
