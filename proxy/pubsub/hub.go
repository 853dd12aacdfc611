package pubsub

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is the namespace of a subscription, as in Redis.
type Kind uint8

const (
	Channel Kind = iota // SUBSCRIBE, PUBLISH; delivered as "message"
	Pattern             // PSUBSCRIBE; delivered as "pmessage"
	Shard               // SSUBSCRIBE, SPUBLISH; delivered as "smessage"
)

// Message is one logical message for a subscriber.
type Message struct {
	Kind    Kind
	Pattern string // the subscribed pattern, for Kind Pattern
	Channel string
	Payload []byte // shared by every subscriber it goes to: read only
}

// Subscriber is a client connection in subscribed mode. Deliver is called
// with the hub's lock held, once per logical message, in the order the hub
// decided them: from the hub's goroutines (one reader per master, the
// expiry timer) and, for keyspace notifications, from the goroutine that
// called Emit. It must not block and must
// not call the Hub: a connection appends the message to its own output
// buffer and, over its output limit (Redis's client-output-buffer-limit
// pubsub), marks itself for closing and calls Remove later from its own
// goroutine. For the same reason, a connection must not call the Hub while
// holding a lock that Deliver takes. Subscribers are compared with ==, so
// a pointer is the usual implementation.
type Subscriber interface {
	Deliver(Message)
}

// Errors of the hub, checked with errors.Is. Their text is for logs; the
// proxy defines what a client reads.
var (
	ErrClosed               = errors.New("pubsub: hub closed")
	ErrReserved             = errors.New("pubsub: channel is reserved for lockproxy's events")
	ErrSubscriberLimit      = errors.New("pubsub: too many subscriptions on this connection")
	ErrTooManySubscriptions = errors.New("pubsub: too many subscriptions on this proxy")
	ErrTooManyChannels      = errors.New("pubsub: too many distinct channels and patterns on this proxy")
	// Patterns are bounded apart from channels: every PUBLISH and every
	// keyspace notification is matched against each pattern the hub
	// holds, on the event loop (receivers.go).
	ErrPatternTooLong         = errors.New("pubsub: pattern longer than MaxPatternLen")
	ErrSubscriberPatternLimit = errors.New("pubsub: too many patterns on this connection")
	ErrTooManyPatterns        = errors.New("pubsub: too many distinct patterns on this proxy")
	ErrNoPublisher            = errors.New("pubsub: no Publisher configured")
)

// Hub carries messages between the masters and local subscribers.
type Hub struct {
	cfg     Config
	masters []*master
	ctx     context.Context // cancelled by Close: ends dials and back-off waits
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	seq     atomic.Uint64 // last event sequence number of this instance
	ksOn    atomic.Bool   // keyspace notifications on (KeyspaceOn)
	// remoteKS: until when (unix ns) another hub makes keyspace
	// notifications (interest.go); interestNow asks for an announcement.
	remoteKS    atomic.Int64
	interestNow chan struct{}

	// mu protects everything below. It is held while a message is
	// decided and fanned out, which makes the decisions and the
	// deliveries one sequence: every subscriber sees messages in the order
	// the hub decided them, and once Unsubscribe returns no message of
	// that subscription reaches the subscriber.
	mu        sync.Mutex
	closed    bool
	recs      map[recKey]*record
	patterns  map[string]*record // the Pattern records, for PUBLISH's count; at most MaxPatterns
	kspats    map[string]*record // those that may match keyspace channels
	subs      map[Subscriber]*subState
	total     int // (subscriber, subscription) pairs
	channels  int // records other than the events channel's
	dd        dedup
	origins   map[string]*origin
	listeners map[*listener]struct{}
	ks        keyspace
	stats     Stats
	holdq     []*entry    // every held message, by deadline (hold.go)
	heldBytes int64       // what they keep
	holdTimer *time.Timer // fires at the earliest deadline
	// leaving: subscriptions the hub dropped whose UNSUBSCRIBE a master
	// (bit i) has not confirmed yet; that master may still count the hub
	// as a receiver (receivers.go). Cleared by the confirmation or by the
	// connection's end; at most maxLeaving names.
	leaving map[recKey]uint16
	// leavingPats: the compiled patterns among leaving's keys, matched by
	// every PUBLISH as the held ones are; at most MaxPatterns.
	leavingPats map[string]*glob
}

type recKey struct {
	kind Kind
	name string
}

// record is one distinct channel, pattern or shard channel the hub holds.
type record struct {
	key       recKey
	subs      map[Subscriber]struct{}
	confirmed uint16 // masters whose subscription is confirmed (bit i = master i)
	local     bool   // keyspace channels: served here, never subscribed on masters
	internal  bool   // the events channel: always subscribed, no subscribers
	fifo      map[uint64][]*entry
	waiters   map[*confirmWaiter]struct{} // AwaitConfirmed (confirm.go)
	holdq     []*entry                    // messages held for their copies, in delivery order (hold.go, order.go)
	last      []*entry                    // per master: the last message of holdq it sent a copy of (order.go)
	ord       int64                       // the last holdq place given (order.go)
	glob      *glob                       // kind Pattern: the compiled pattern
}

type subState struct {
	recs     map[recKey]struct{}
	shard    int // how many of recs are shard channels
	patterns int // and how many are patterns
}

// New starts a hub: one subscriber connection per master, made in the
// background and again after every failure. Close stops it.
func New(cfg Config) (*Hub, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	flags, _ := ParseKeyspaceEvents(cfg.KeyspaceEvents)
	h := &Hub{
		cfg:         cfg,
		recs:        map[recKey]*record{},
		leaving:     map[recKey]uint16{},
		leavingPats: map[string]*glob{},
		patterns:    map[string]*record{},
		kspats:      map[string]*record{},
		subs:        map[Subscriber]*subState{},
		origins:     map[string]*origin{},
		listeners:   map[*listener]struct{}{},

		interestNow: make(chan struct{}, 1),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.dd.init(&h.cfg)
	h.ks.init(&h.cfg, flags)
	h.ksOn.Store(flags.notifies())
	ev := &record{key: recKey{Channel, cfg.EventsChannel}, internal: true}
	h.recs[ev.key] = ev
	// Every master is in h.masters before any connection runs: a
	// connection's pushes read h.masters (onPush) as soon as it is up.
	for i, addr := range cfg.Masters {
		h.masters = append(h.masters, &master{h: h, index: i, addr: addr, wake: make(chan struct{}, 1)})
	}
	for _, m := range h.masters {
		h.wg.Go(m.run)
	}
	if cfg.Publisher != nil {
		h.wg.Go(h.announceInterest)
	}
	return h, nil
}

// Close disconnects from the masters and waits for the hub's goroutines.
// Subscribers get nothing more; later calls fail with ErrClosed.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.ks.stop()
	if h.holdTimer != nil {
		h.holdTimer.Stop()
	}
	h.cancel()
	for _, m := range h.masters {
		m.closeConn()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Subscribe subscribes s to name in namespace kind. The first local
// subscriber of a name makes the hub subscribe it on every master. count is
// what Redis puts in the confirmation: s's channels and patterns together,
// or for Shard its shard channels. Subscribing twice is not an error.
func (h *Hub) Subscribe(s Subscriber, kind Kind, name string) (count int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, ErrClosed
	}
	if kind == Channel && name == h.cfg.EventsChannel {
		return 0, ErrReserved
	}
	if kind == Pattern && len(name) > MaxPatternLen {
		return 0, ErrPatternTooLong
	}
	st := h.subs[s]
	k := recKey{kind, name}
	if st != nil {
		if _, ok := st.recs[k]; ok {
			return st.count(kind), nil
		}
		if len(st.recs) >= h.cfg.MaxPerSubscriber {
			return 0, ErrSubscriberLimit
		}
		if kind == Pattern && st.patterns >= h.cfg.MaxPatternsPerSubscriber {
			return 0, ErrSubscriberPatternLimit
		}
	}
	if h.total >= h.cfg.MaxSubscriptions {
		return 0, ErrTooManySubscriptions
	}
	r := h.recs[k]
	if r == nil {
		if h.channels >= h.cfg.MaxChannels {
			return 0, ErrTooManyChannels
		}
		if kind == Pattern && len(h.patterns) >= h.cfg.MaxPatterns {
			return 0, ErrTooManyPatterns
		}
		r = &record{key: k, subs: map[Subscriber]struct{}{}, local: localOnly(kind, name)}
		h.recs[k] = r
		h.channels++
		if kind == Pattern {
			r.glob = h.leavingPats[name] // compiled already, if it is leaving
			if r.glob == nil {
				r.glob = compileGlob(name)
			}
			h.patterns[name] = r
			if mayMatchKeyspace(name) {
				h.kspats[name] = r
			}
		}
		if !r.local {
			for _, m := range h.masters {
				m.send(subCmd[kind], name)
			}
		}
	}
	if st == nil {
		st = &subState{recs: map[recKey]struct{}{}}
		h.subs[s] = st
	}
	st.recs[k] = struct{}{}
	switch kind {
	case Shard:
		st.shard++
	case Pattern:
		st.patterns++
	}
	r.subs[s] = struct{}{}
	h.total++
	return st.count(kind), nil
}

// Unsubscribe undoes Subscribe; the last local subscriber leaving makes
// the hub unsubscribe on every master. Unsubscribing a name s does not
// hold is not an error. count is as for Subscribe.
func (h *Hub) Unsubscribe(s Subscriber, kind Kind, name string) (count int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.subs[s]
	if st == nil {
		return 0
	}
	h.unsubscribe(s, st, recKey{kind, name})
	return st.count(kind)
}

// Remove drops every subscription of s: call it when the connection
// closes.
func (h *Hub) Remove(s Subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.subs[s]; st != nil {
		for k := range st.recs {
			h.unsubscribe(s, st, k)
		}
	}
}

// Subscriptions lists s's names in namespace kind, for an UNSUBSCRIBE
// without arguments.
func (h *Hub) Subscriptions(s Subscriber, kind Kind) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	if st := h.subs[s]; st != nil {
		for k := range st.recs {
			if k.kind == kind {
				names = append(names, k.name)
			}
		}
	}
	return names
}

// unsubscribe removes one subscription of s. h.mu is held.
func (h *Hub) unsubscribe(s Subscriber, st *subState, k recKey) {
	if _, ok := st.recs[k]; !ok {
		return
	}
	delete(st.recs, k)
	switch k.kind {
	case Shard:
		st.shard--
	case Pattern:
		st.patterns--
	}
	if len(st.recs) == 0 {
		delete(h.subs, s)
	}
	h.total--
	r := h.recs[k]
	delete(r.subs, s)
	if len(r.subs) > 0 {
		return
	}
	delete(h.recs, k)
	h.channels--
	if k.kind == Pattern {
		delete(h.patterns, k.name)
		delete(h.kspats, k.name)
	}
	h.dd.dropRecord(r)
	h.dropHeld(r)
	if !r.local {
		var up uint16
		for i, m := range h.masters {
			m.send(unsubCmd[k.kind], k.name)
			if m.conn != nil {
				up |= 1 << i
			}
		}
		if up != 0 && k.kind == Pattern && h.leavingPats[k.name] == nil {
			if len(h.leavingPats) >= h.cfg.MaxPatterns {
				return // forgotten, as past maxLeaving: PUBLISH's work stays bounded
			}
			if len(h.leaving) < maxLeaving {
				h.leavingPats[k.name] = r.glob
			}
		}
		if up != 0 && (len(h.leaving) < maxLeaving || h.leaving[k] != 0) {
			h.leaving[k] |= up
		}
	}
}

// maxLeaving bounds Hub.leaving. Beyond it a dropped subscription is
// forgotten at once: PUBLISH's count may then include the hub itself
// until its masters confirm, as it would without the table.
const maxLeaving = 1 << 16

func (st *subState) count(kind Kind) int {
	if kind == Shard {
		return st.shard
	}
	return len(st.recs) - st.shard
}

// Keyspace notification channels are lockproxy's to produce (keyspace.go):
// masters' own are never passed on, and a subscription that can only match
// them is not made on the masters.
// fanout delivers m to the subscribers of r. h.mu is held.
func (h *Hub) fanout(r *record, m Message) {
	for s := range r.subs {
		s.Deliver(m)
		h.stats.Delivered++
	}
}

// onMessage handles a copy of a message from master i. h.mu is held.
func (h *Hub) onMessage(i int, kind Kind, pattern, channel string, payload []byte) {
	if channel == h.cfg.EventsChannel {
		if kind == Channel {
			h.onEventPayload(payload)
		}
		return // a pattern's copy of an event is not for clients
	}
	if kind != Shard && isKeyspace(channel) {
		return // a master's own keyspace notification: lockproxy makes its own
	}
	name := channel
	if kind == Pattern {
		name = pattern
	}
	r := h.recs[recKey{kind, name}]
	if r == nil || r.local || r.internal {
		return // unsubscribed meanwhile
	}
	h.onCopy(r, i, Message{Kind: kind, Pattern: pattern, Channel: channel, Payload: payload})
}
