package proxy

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// Pub/sub messages taken for subscribers and not yet framed (pushes.go),
// and the large payloads framed but not yet written (splice.go), share
// their payload between every subscriber of the channel, so they are not
// charged to each connection (kept.go): a broadcast would count once per
// subscriber. Each subscriber holds at most the pubsub hard
// limit, but subscribers of distinct channels add up: 40 that never read,
// each sent 12 messages of 1 MB on its own channel, took lockproxy to
// 924 MB. So the front counts each payload once, however many
// subscribers hold it, and bounds the total at client_query_buffer_total;
// past it, subscribers are closed until it fits, as the pubsub hard limit
// closes one: first those whose closing frees the most (checkShared).

// payloadKey names one payload: the hub hands every subscriber the same
// slice.
type payloadKey struct {
	p *byte
	n int
}

// sharedPushes counts the distinct payloads subscribers hold. Loop only.
type sharedPushes struct {
	refs  map[payloadKey]int32
	bytes int64
	// seen mirrors bytes for INFO and /metrics, which may run off the
	// loop (a TLS client's INFO); nil in tests that build one bare.
	seen *atomic.Int64
}

// add changes bytes by n, and its mirror.
func (s *sharedPushes) add(n int64) {
	s.bytes += n
	if s.seen != nil {
		s.seen.Add(n)
	}
}

// hold counts one more holder of the payload p (a whole Message.Payload).
func (s *sharedPushes) hold(p []byte) {
	if len(p) == 0 {
		return
	}
	if s.refs == nil {
		s.refs = map[payloadKey]int32{}
	}
	k := payloadKey{&p[0], len(p)}
	if s.refs[k] == 0 {
		s.add(int64(len(p)))
	}
	s.refs[k]++
}

// drop counts one holder of p less: its bytes are given back with the
// last.
func (s *sharedPushes) drop(p []byte) {
	if len(p) == 0 {
		return
	}
	k := payloadKey{&p[0], len(p)}
	switch n := s.refs[k]; n {
	case 0:
	case 1:
		delete(s.refs, k)
		s.add(-int64(len(p)))
	default:
		s.refs[k] = n - 1
	}
}

// dropPushed forgets the connection's taken messages (it closes).
func (lc *clientConn) dropPushed() {
	for i := range lc.pushed {
		lc.f.shared.drop(lc.pushed[i].Payload)
	}
	lc.pushed, lc.pushedSize, lc.reserved = nil, 0, 0
}

// holdsShared reports whether the connection holds shared payloads.
func (lc *clientConn) holdsShared() bool {
	return len(lc.pushed) > 0 || len(lc.splices) > 0 || len(lc.lent) > 0
}

// sharedHeld calls f with each shared payload the connection holds, once
// per hold: taken and not framed, framed and not written, lent to its
// writer.
func (lc *clientConn) sharedHeld(f func(p []byte)) {
	for i := range lc.pushed {
		f(lc.pushed[i].Payload)
	}
	for i := range lc.splices {
		f(lc.splices[i].p)
	}
	for _, p := range lc.lent {
		f(p)
	}
}

// checkShared closes subscribers while the messages all subscribers hold
// are over the budget: first those whose closing frees the most, the
// payloads no other subscriber holds. Subscribers sharing a broadcast
// each hold its whole size, but closing one of them frees nothing while
// another still holds it: ranked by what they held, every subscriber of a
// broadcast under the budget was closed, for nothing, before those of
// their own channels that went over it. Among those freeing as much (none,
// when what is over the budget is shared), the one holding the most goes
// first. The ranking is made once per call, so that closing thousands of
// a broadcast's subscribers costs one pass, not one per close; what a
// subscriber frees only grows as others close, so a rank made before
// never overstates it.
func (f *front) checkShared() {
	limit := f.s.budget.Limit()
	if limit <= 0 || f.shared.bytes <= limit {
		return
	}
	type sub struct {
		lc    *clientConn
		freed int64
	}
	var subs []sub
	for lc := range f.conns {
		if lc.holdsShared() && !lc.closed {
			subs = append(subs, sub{lc, f.shared.freed(lc.sharedHeld)})
		}
	}
	slices.SortFunc(subs, func(a, b sub) int {
		if c := cmp.Compare(b.freed, a.freed); c != 0 {
			return c
		}
		return cmp.Compare(b.lc.pushedSize+b.lc.splicedSize, a.lc.pushedSize+a.lc.splicedSize)
	})
	for _, v := range subs {
		if f.shared.bytes <= limit {
			return
		}
		v.lc.pushOverflow("client_query_buffer_total: the pub/sub messages all subscribers have not read, each counted once")
	}
}

// freed is what dropping one subscriber's payloads (each gives them to
// f) gives back: the payloads that no other subscriber holds (one
// subscriber holds a payload twice when it matches a channel and a
// pattern).
func (s *sharedPushes) freed(each func(f func(p []byte))) int64 {
	var n int64
	var mine map[payloadKey]int32 // payloads held more than once, by how many of its holds
	each(func(p []byte) {
		if len(p) == 0 {
			return
		}
		k := payloadKey{&p[0], len(p)}
		switch refs := s.refs[k]; {
		case refs == 1:
			n += int64(len(p))
		case refs > 1:
			if mine == nil {
				mine = map[payloadKey]int32{}
			}
			mine[k]++
		}
	})
	for k, held := range mine {
		if s.refs[k] == held {
			n += int64(k.n)
		}
	}
	return n
}
