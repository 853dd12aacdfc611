package pubsub

import (
	"time"
)

// Keyspace interest across proxies. A proxy turns its grants, extensions
// and releases into events (a PUBLISH per master each) only when somebody
// will make keyspace notifications of them. Its own notify-keyspace-events
// says so for its subscribers; for the others', every hub whose setting is
// on says so on the events channel (EventInterest), at once when it is
// turned on and then every interestEvery, and every hub that hears it emits
// for interestTTL after. So a library that turns notifications on through
// one proxy (CONFIG SET, as in its constructor) hears the releases made
// through every other, within the time the first interest event takes to
// reach them (a PUBLISH: milliseconds).

const (
	interestEvery = 2 * time.Second
	interestTTL   = 3 * interestEvery
)

// EmitsKeyspace reports whether the proxy should emit its grants,
// extensions and releases as events: this hub makes keyspace
// notifications, or another hub on the master set does.
func (h *Hub) EmitsKeyspace() bool {
	if h.ksOn.Load() {
		return true
	}
	until := h.remoteKS.Load() // 0 until another hub said so: no clock read
	return until != 0 && time.Now().UnixNano() < until
}

// onInterest records another hub's interest. h.mu is held.
func (h *Hub) onInterest(ev Event) {
	if ev.Origin != h.cfg.InstanceID {
		h.remoteKS.Store(time.Now().Add(interestTTL).UnixNano())
	}
}

// announceInterest emits EventInterest while this hub makes keyspace
// notifications, until the hub closes.
func (h *Hub) announceInterest() {
	t := time.NewTicker(interestEvery)
	defer t.Stop()
	for {
		if h.ksOn.Load() {
			h.Emit(Event{Type: EventInterest}) // a lost one is sent again next tick
		}
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		case <-h.interestNow:
		}
	}
}
