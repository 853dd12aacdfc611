package pubsub

import (
	"container/heap"
	"fmt"
	"time"
)

// This file synthesizes keyspace notifications (__keyspace@0__:<key>,
// __keyevent@0__:<event>) for lock keys from lockproxy's events, so that
// each logical set, expire, del, lpush and expired reaches each local
// subscriber once, whichever proxy decided it; docs/pubsub.md says why this
// and not the masters' own notifications. Everything here runs with h.mu
// held, the timer's callback included.

// NotifyFlags is a parsed notify-keyspace-events value.
type NotifyFlags uint16

// The classes of notify-keyspace-events, as Redis 7.0 names them.
const (
	NotifyKeyspace NotifyFlags = 1 << iota // K
	NotifyKeyevent                         // E
	NotifyGeneric                          // g: del, expire…
	NotifyString                           // $: set…
	NotifyList                             // l: lpush…
	NotifySet                              // s
	NotifyHash                             // h
	NotifyZset                             // z
	NotifyExpired                          // x: expired
	NotifyEvicted                          // e
	NotifyStream                           // t
	NotifyModule                           // d
	NotifyNew                              // n
	NotifyKeyMiss                          // m
	// NotifyAll is "A": every class but n and m, as in Redis.
	NotifyAll = NotifyGeneric | NotifyString | NotifyList | NotifySet | NotifyHash |
		NotifyZset | NotifyExpired | NotifyEvicted | NotifyStream | NotifyModule
)

// flagChars lists each class with its character, in the order Redis
// prints them (keyspaceEventsFlagsToString).
var flagChars = []struct {
	f NotifyFlags
	c byte
}{
	{NotifyGeneric, 'g'}, {NotifyString, '$'}, {NotifyList, 'l'}, {NotifySet, 's'},
	{NotifyHash, 'h'}, {NotifyZset, 'z'}, {NotifyExpired, 'x'}, {NotifyEvicted, 'e'},
	{NotifyStream, 't'}, {NotifyModule, 'd'}, {NotifyNew, 'n'},
	{NotifyKeyspace, 'K'}, {NotifyKeyevent, 'E'}, {NotifyKeyMiss, 'm'},
}

// ParseKeyspaceEvents parses a notify-keyspace-events value as Redis does:
// any of "AKEg$lshzxetdmn" in any order; anything else is an error.
func ParseKeyspaceEvents(s string) (NotifyFlags, error) {
	var f NotifyFlags
next:
	for i := 0; i < len(s); i++ {
		if s[i] == 'A' {
			f |= NotifyAll
			continue
		}
		for _, fc := range flagChars {
			if fc.c == s[i] {
				f |= fc.f
				continue next
			}
		}
		return 0, fmt.Errorf("pubsub: invalid notify-keyspace-events class %q; use 'Ag$lshzxeKEtmdn'", s[i])
	}
	return f, nil
}

// String renders f as Redis's CONFIG GET does.
func (f NotifyFlags) String() string {
	var b []byte
	all := f&NotifyAll == NotifyAll
	if all {
		b = append(b, 'A')
	}
	for _, fc := range flagChars {
		if f&fc.f != 0 && !(all && fc.f&NotifyAll != 0) {
			b = append(b, fc.c)
		}
	}
	return string(b)
}

// SetKeyspaceEvents changes which notifications this hub synthesizes
// (CONFIG SET notify-keyspace-events on this proxy). It changes nothing
// on the masters.
func (h *Hub) SetKeyspaceEvents(s string) error {
	f, err := ParseKeyspaceEvents(s)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.ks.flags = f
	on := f.notifies()
	h.ksOn.Store(on)
	h.mu.Unlock()
	if on {
		select { // tell the other proxies now, not at the next tick
		case h.interestNow <- struct{}{}:
		default:
		}
	}
	return nil
}

// KeyspaceOn reports whether this hub synthesizes any keyspace
// notification: whether the proxy should emit its grants, extensions and
// releases as events (each costs a PUBLISH per master).
func (h *Hub) KeyspaceOn() bool { return h.ksOn.Load() }

// notifies: a channel (K or E) and a class lock keys produce (g, $, l, x).
func (f NotifyFlags) notifies() bool {
	return f&(NotifyKeyspace|NotifyKeyevent) != 0 && f&(NotifyGeneric|NotifyString|NotifyList|NotifyExpired) != 0
}

// KeyspaceEvents returns the current value, as CONFIG GET renders it.
func (h *Hub) KeyspaceEvents() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ks.flags.String()
}

type keyspace struct {
	flags NotifyFlags
	due   expiries           // by time
	byKey map[string]*expiry // the same, by key
	timer *time.Timer        // fires fireExpiries at the earliest due
	max   int                // Config.MaxExpiries
	drift float64            // Config.DriftFactor
}

type expiry struct {
	key   string
	at    int64 // on h.dd's clock
	index int   // in due
}

func (ks *keyspace) init(cfg *Config, flags NotifyFlags) {
	ks.flags, ks.max, ks.drift = flags, cfg.MaxExpiries, cfg.DriftFactor
	ks.byKey = map[string]*expiry{}
}

func (ks *keyspace) stop() {
	if ks.timer != nil {
		ks.timer.Stop()
	}
}

// onEvent turns one event into its notifications and keeps the expiry
// schedule.
func (ks *keyspace) onEvent(h *Hub, ev Event) {
	switch ev.Type {
	case EventSet:
		// A SET with an expiry notifies set, then expire, in Redis.
		h.notify(NotifyString, "set", ev.Key)
		if ev.TTL > 0 {
			h.notify(NotifyGeneric, "expire", ev.Key)
		}
		ks.schedule(h, ev.Key, ev.TTL)
	case EventExpire:
		h.notify(NotifyGeneric, "expire", ev.Key)
		ks.schedule(h, ev.Key, ev.TTL)
	case EventDel:
		h.notify(NotifyGeneric, "del", ev.Key)
		ks.cancel(ev.Key)
	case EventPush:
		h.notify(NotifyList, "lpush", ev.Key)
	}
}

// schedule arranges one expired notification for key, replacing any
// earlier one. It comes ttl plus the drift allowance after now, that is
// after the event arrived, which is after every master wrote the key: by
// then the key has expired on every master whose clock is within the
// drift allowance, so a waiter woken by it finds the lock free. Late is
// a slower wake-up; early would be worse: the waiter's retry fails and no
// further notification comes.
func (ks *keyspace) schedule(h *Hub, key string, ttl time.Duration) {
	if ks.flags&NotifyExpired == 0 || ks.flags&(NotifyKeyspace|NotifyKeyevent) == 0 || ttl <= 0 {
		ks.cancel(key)
		return
	}
	at := h.dd.now() + int64(ttl) + int64(float64(ttl)*ks.drift) + int64(2*time.Millisecond)
	if e := ks.byKey[key]; e != nil {
		e.at = at
		heap.Fix(&ks.due, e.index)
	} else {
		if len(ks.due) >= ks.max {
			h.stats.ExpiriesDropped++
			return
		}
		e := &expiry{key: key, at: at}
		heap.Push(&ks.due, e)
		ks.byKey[key] = e
	}
	ks.arm(h)
}

// ScheduleExpiry arranges an expired notification for key as if a set
// with this remaining ttl had just been heard of, replacing any earlier
// one; ttl <= 0 cancels. It notifies nothing else. The proxy can call it
// for a key a client starts listening to (__keyspace@0__:<key>) with the
// key's quorum PTTL, to cover locks granted before this proxy started,
// whose events it never heard.
func (h *Hub) ScheduleExpiry(key string, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.ks.schedule(h, key, ttl)
	}
}

// ScheduleExpiryIfNone is ScheduleExpiry for a key with no expiry
// scheduled yet: what the proxy calls with a quorum PTTL read when a client
// subscribes to the key's keyspace channel. An event heard meanwhile is
// fresher than the read, so it wins.
func (h *Hub) ScheduleExpiryIfNone(key string, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.ks.byKey[key]; !ok && !h.closed && ttl > 0 {
		h.ks.schedule(h, key, ttl)
	}
}

func (ks *keyspace) cancel(key string) {
	if e := ks.byKey[key]; e != nil {
		heap.Remove(&ks.due, e.index)
		delete(ks.byKey, key)
	}
}

// arm sets the timer for the earliest due expiry.
func (ks *keyspace) arm(h *Hub) {
	if len(ks.due) == 0 {
		return
	}
	d := time.Duration(ks.due[0].at - h.dd.now())
	if ks.timer == nil {
		ks.timer = time.AfterFunc(d, h.fireExpiries)
	} else {
		ks.timer.Reset(d)
	}
}

// fireExpiries sends the expired notifications that are due. A call that
// finds none due (a timer reset while it fired) only rearms.
func (h *Hub) fireExpiries() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	ks := &h.ks
	now := h.dd.now()
	for len(ks.due) > 0 && ks.due[0].at <= now {
		e := heap.Pop(&ks.due).(*expiry)
		delete(ks.byKey, e.key)
		h.notify(NotifyExpired, "expired", e.key)
	}
	ks.arm(h)
}

// MaxNotifyChannel bounds the keyspace channels notified: the keyspace
// channel of a longer key ("__keyspace@0__:" and a key over 4081 bytes) is
// not notified (its keyevent one is). No client can SUBSCRIBE to it
// (channel names are at most 4096 bytes), and matching every pattern
// against a key of up to proto_max_bulk_len (1 MiB) would hold the event
// loop for seconds with MaxPatterns patterns; so the work per
// notification is bounded as PUBLISH's is (receivers.go).
const MaxNotifyChannel = 4096

// notify delivers one keyspace notification to local subscribers, if the
// flags ask for its class. h.mu is held.
func (h *Hub) notify(class NotifyFlags, event, key string) {
	f := h.ks.flags
	if f&class == 0 {
		return
	}
	if f&NotifyKeyspace != 0 && len("__keyspace@0__:")+len(key) <= MaxNotifyChannel {
		h.fanoutLocal("__keyspace@0__:"+key, []byte(event))
	}
	if f&NotifyKeyevent != 0 {
		h.fanoutLocal("__keyevent@0__:"+event, []byte(key))
	}
}

// fanoutLocal delivers a message produced here (not by a master) to the
// subscribers of the channel and of every pattern that matches it.
func (h *Hub) fanoutLocal(channel string, payload []byte) {
	if r := h.recs[recKey{Channel, channel}]; r != nil {
		h.fanout(r, Message{Kind: Channel, Channel: channel, Payload: payload})
	}
	for p, r := range h.kspats {
		if r.glob.match(channel) {
			h.fanout(r, Message{Kind: Pattern, Pattern: p, Channel: channel, Payload: payload})
		}
	}
}

// expiries is a min-heap of expiry by at.
type expiries []*expiry

func (q expiries) Len() int           { return len(q) }
func (q expiries) Less(i, j int) bool { return q[i].at < q[j].at }
func (q expiries) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *expiries) Push(x any) {
	e := x.(*expiry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *expiries) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
