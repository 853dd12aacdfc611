package proxy

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// lockproxy's events (proxy/pubsub): what this proxy decided, told to
// every proxy on the master set, for BLPOP waiters (a signal list pushed)
// and keyspace notifications (a lock granted, extended, released). Only
// decisions emit: a quorum's yes, never a minority's write or its undo.
// Grants, extensions and releases are emitted only while this proxy's
// notify-keyspace-events asks for keyspace notifications (each is one
// PUBLISH per master), pushes whenever there is a hub.

// slotEvent is what a command's decision tells the other proxies.
type slotEvent struct {
	typ     pubsub.EventType // EventSet, EventExpire or EventDel on keys; 0: none
	keys    []string
	ttl     time.Duration
	signals []string // lists pushed on a yes (EventPush)
	counted bool     // only when the reply counts a key (DEL)
}

// eventsFor returns where a command's events go, or nil when no event
// would be emitted: no hub, or a keyspace event while notifications are
// off and no signal is pushed.
func (s *Server) eventsFor(typ pubsub.EventType, signals int) *slotEvent {
	hub := s.cfg.Hub
	if hub == nil {
		return nil
	}
	keyspace := hub.EmitsKeyspace()
	if signals == 0 && !keyspace {
		return nil
	}
	ev := &slotEvent{}
	if keyspace {
		ev.typ = typ
	}
	return ev
}

// keyEvent attaches to the last slot the event its decision emits on keys.
func (s *Server) keyEvent(c *client, typ pubsub.EventType, ttl time.Duration, keys ...[]byte) {
	ev := s.eventsFor(typ, 0)
	if ev == nil || len(c.slots) == 0 {
		return
	}
	for _, k := range keys {
		ev.keys = append(ev.keys, string(k))
	}
	ev.ttl = ttl
	c.slots[len(c.slots)-1].ev = ev
}

// scriptEvent attaches to the last slot the events of a lock script: its
// lock keys by its kind, its signal lists.
func (s *Server) scriptEvent(c *client, sc *catalog.Script, keys, argv [][]byte, ttl time.Duration) {
	var typ pubsub.EventType
	switch sc.Kind {
	case quorum.Acquire, quorum.AcquireOrExtend:
		typ = pubsub.EventSet
	case quorum.Extend:
		typ = pubsub.EventExpire
	case quorum.Release:
		typ = pubsub.EventDel
	}
	ev := s.eventsFor(typ, len(sc.Signals))
	if ev == nil || len(c.slots) == 0 {
		return
	}
	at := func(a quorum.Arg) []byte {
		if a.Keys {
			if a.Index >= 1 && a.Index <= len(keys) {
				return keys[a.Index-1]
			}
		} else if a.Index >= 1 && a.Index <= len(argv) {
			return argv[a.Index-1]
		}
		return nil
	}
	for _, a := range sc.Signals {
		if k := at(a); k != nil {
			ev.signals = append(ev.signals, string(k))
		}
	}
	if ev.typ != 0 {
		switch {
		case sc.KeyArg > 0:
			if k := at(quorum.Arg{Index: sc.KeyArg}); k != nil {
				ev.keys = append(ev.keys, string(k))
			}
		case len(sc.LockKeys) > 0:
			for _, i := range sc.LockKeys {
				if k := at(quorum.Arg{Keys: true, Index: i}); k != nil {
					ev.keys = append(ev.keys, string(k))
				}
			}
		default:
			for _, k := range keys {
				ev.keys = append(ev.keys, string(k))
			}
		}
		lock := ev.keys[:0]
		for _, k := range ev.keys {
			if !ev.isSignal([]byte(k)) {
				lock = append(lock, k)
			}
		}
		ev.keys = lock
	}
	ev.ttl = ttl
	c.slots[len(c.slots)-1].ev = ev
}

func (ev *slotEvent) isSignal(k []byte) bool {
	for _, s := range ev.signals {
		if s == string(k) {
			return true
		}
	}
	return false
}

// emit publishes what a decided request's slot announces, if its outcome
// is a yes. On the loop, with no lock held (pubsub.Hub.Emit's rule).
func (s *Server) emit(sl *slot) {
	ev, r := sl.ev, sl.req
	if ev == nil || r == nil || !r.Decided() {
		return
	}
	sl.ev = nil
	o := r.Outcome()
	if o != quorum.Granted && o != quorum.Done {
		return
	}
	if ev.counted {
		// DEL answers how many keys a quorum held: none, nothing deleted.
		if rep, _ := r.Result(); rep.Type != resp.Integer || rep.Int == 0 {
			return
		}
	}
	hub := s.cfg.Hub
	for _, k := range ev.keys {
		if err := hub.Emit(pubsub.Event{Type: ev.typ, Key: k, TTL: ev.ttl}); err != nil {
			s.cfg.Logger.Debug("lockproxy event not published", "key", k, "err", err)
			return
		}
	}
	for _, k := range ev.signals {
		if err := hub.Emit(pubsub.Event{Type: pubsub.EventPush, Key: k}); err != nil {
			s.cfg.Logger.Debug("lockproxy event not published", "key", k, "err", err)
			return
		}
	}
}
