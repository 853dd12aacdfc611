package pubsub

// Receivers computes the reply to a client's PUBLISH (kind Channel) or
// SPUBLISH (kind Shard) of channel that the proxy sent to every master.
// replies[i] is master i's integer reply, negative when it did not answer.
//
// A master counts its own subscriber connections: each hub subscribed to
// the channel or to a matching pattern counts as one per subscription,
// whatever number of clients that hub serves, and clients connected to the
// master directly count as themselves. So the answer is
//
//	local + max over answering masters i of (replies[i] - own[i])
//
// where local is what Redis would answer on this proxy (the local
// subscribers of the channel plus, per matching pattern, its local
// subscribers) and own[i] is this hub's part of replies[i]: one for the
// channel, one per matching pattern, where master i may count it. That is
// where the hub's subscription is confirmed, and also where it is not
// confirmed yet but the connection is up (the master may have processed
// the SUBSCRIBE before the hub read its answer), and where a dropped
// subscription's UNSUBSCRIBE is not confirmed yet (Hub.leaving). The
// maximum, not a sum, because every master counts the same remote
// receivers. The answer is exact for the proxy's own subscribers and for
// direct ones; each other proxy counts as one per matching subscription,
// not as its number of clients: it is 0 exactly when nobody on the master
// set will get the message (what callers test), and never more than the
// true count; while this hub's subscriptions change it may be low by one
// per changing subscription. It can be low by the receivers only a master
// that did not answer knows of.
//
// A master's reply and the hub's confirmations come on different
// connections: the hub may read a master's confirmation of its
// UNSUBSCRIBE before the reply to a PUBLISH that master ran earlier, while
// it still counted the hub. So own[i] is the larger of the hub's part when
// the PUBLISH was sent (sent, from Own) and when its replies are in.
func (h *Hub) Receivers(kind Kind, channel string, replies []int64, sent Owned) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	local, own := h.owned(kind, channel)
	var remote int64
	for i, n := range replies {
		if i < len(h.masters) && n >= 0 {
			remote = max(remote, n-max(own[i], sent[i]))
		}
	}
	return local + remote
}

// Owned is, per master, the hub's part of that master's count of a
// channel's receivers (Receivers).
type Owned [maxMasters]int64

// Own returns the hub's part of each master's count of channel's
// receivers now: taken when a PUBLISH is sent, for Receivers.
func (h *Hub) Own(kind Kind, channel string) Owned {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, own := h.owned(kind, channel)
	return own
}

// owned returns the local receivers of a PUBLISH of channel and the hub's
// part of each master's count. h.mu is held.
func (h *Hub) owned(kind Kind, channel string) (local int64, own Owned) {
	add := func(r *record) {
		local += int64(len(r.subs))
		if r.local {
			return
		}
		for i, m := range h.masters {
			// Confirmed or not yet: while the connection is up (a
			// confirmation is forgotten with its connection).
			if m.conn != nil {
				own[i]++
			}
		}
	}
	leaving := func(k recKey) {
		b := h.leaving[k]
		for i := range h.masters {
			if b&(1<<i) != 0 {
				own[i]++
			}
		}
	}
	k := recKey{kind, channel}
	if r := h.recs[k]; r != nil && !r.internal {
		add(r)
	}
	leaving(k)
	if kind == Channel {
		// Bounded work on the event loop: at most MaxPatterns held and
		// MaxPatterns leaving patterns, each matched in time linear in
		// the channel (at most 4 KiB from a client) by its compiled form.
		for _, r := range h.patterns {
			if r.glob.match(channel) {
				add(r)
			}
		}
		for p, g := range h.leavingPats {
			if g.match(channel) {
				leaving(recKey{Pattern, p})
			}
		}
	}
	return local, own
}

// Stats are counters and gauges of a hub, for metrics and tests.
type Stats struct {
	MastersUp     int    // subscriber connections up now
	Connects      uint64 // connections made
	ConnectErrors uint64 // connections lost or that could not be made
	Channels      int    // distinct channels, patterns and shard channels held
	Subscriptions int    // (subscriber, channel) pairs
	Delivered     uint64
	Oversize      uint64 // messages skipped for MaxPayload
	Refused       uint64 // subscription commands a master refused
	// PingErrors: PINGs a master answered with an error (LOADING while it
	// loads its dataset), counted as answered (master.go).
	PingErrors uint64
	// Dedup: copies recognized and dropped; entries remembered now;
	// entries forgotten early because MaxDedupEntries was reached; and
	// entries that expired while some master still owed a copy (a master
	// that did not publish it, or lags by more than DedupWindow).
	Duplicates, DedupEvicted, DedupUnpaid uint64
	DedupEntries                          int
	// Events delivered to listeners, copies dropped, payloads on the
	// events channel that are not events.
	Events, EventDuplicates, BadEvents uint64
	EventOrigins                       int
	// Expiries scheduled now, and keys that got none (MaxExpiries).
	Expiries        int
	ExpiriesDropped uint64
	// HeldTimeouts: messages delivered HoldBack after their first copy,
	// with fewer copies than a quorum (hold.go).
	HeldTimeouts uint64
	// HeldRedelivered: of those, messages delivered again because copies
	// published after the early delivery completed their quorum
	// (fence.go).
	HeldRedelivered uint64
}

// Stats returns the hub's current figures.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dd.expire(h.dd.now())
	s := h.stats
	for _, m := range h.masters {
		if m.conn != nil {
			s.MastersUp++
		}
	}
	s.Channels, s.Subscriptions = h.channels, h.total
	s.Duplicates, s.DedupEvicted, s.DedupUnpaid = h.dd.dups, h.dd.evicted, h.dd.unpaid
	s.DedupEntries = h.dd.n
	s.EventOrigins = len(h.origins)
	s.Expiries = len(h.ks.due)
	return s
}
