package proxy

import (
	"sort"

	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// Pub/sub messages taken for subscribers and not yet framed (pushes.go)
// share their payload between every subscriber of the channel, so they
// are not charged to each connection (kept.go): a broadcast would count
// once per subscriber. Each subscriber holds at most the pubsub hard
// limit, but subscribers of distinct channels add up: 40 that never read,
// each sent 12 messages of 1 MB on its own channel, took lockproxy to
// 924 MB. So the front counts each payload once, however many
// subscribers hold it, and bounds the total at client_query_buffer_total;
// past it, the subscribers holding the most unread messages are closed
// until it fits, as the pubsub hard limit closes one.

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
}

func (s *sharedPushes) hold(m *pubsub.Message) {
	if len(m.Payload) == 0 {
		return
	}
	if s.refs == nil {
		s.refs = map[payloadKey]int32{}
	}
	k := payloadKey{&m.Payload[0], len(m.Payload)}
	if s.refs[k] == 0 {
		s.bytes += int64(len(m.Payload))
	}
	s.refs[k]++
}

func (s *sharedPushes) drop(m *pubsub.Message) {
	if len(m.Payload) == 0 {
		return
	}
	k := payloadKey{&m.Payload[0], len(m.Payload)}
	switch n := s.refs[k]; n {
	case 0:
	case 1:
		delete(s.refs, k)
		s.bytes -= int64(len(m.Payload))
	default:
		s.refs[k] = n - 1
	}
}

// dropPushed forgets the connection's taken messages (it closes).
func (lc *clientConn) dropPushed() {
	for i := range lc.pushed {
		lc.f.shared.drop(&lc.pushed[i])
	}
	lc.pushed, lc.pushedSize = nil, 0
}

// checkShared closes subscribers, those holding the most unread messages
// first, while the messages all subscribers hold are over the budget.
func (f *front) checkShared() {
	limit := f.s.budget.Limit()
	if limit <= 0 || f.shared.bytes <= limit {
		return
	}
	var subs []*clientConn
	for lc := range f.conns {
		if lc.pushedSize > 0 {
			subs = append(subs, lc)
		}
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].pushedSize > subs[j].pushedSize })
	for _, lc := range subs {
		if f.shared.bytes <= limit {
			return
		}
		lc.pushOverflow("client_query_buffer_total: the pub/sub messages all subscribers have not read, each counted once")
	}
}
