package proxy

import (
	"math"
	"strconv"
	"sync"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// A connection's side of pub/sub: the hub (Config.Hub) hands each logical
// message to Deliver, from its own goroutines; the connection frames it on
// its loop, RESP2 or RESP3 as the client speaks, after the replies of the
// pipeline it is running, and before the confirmation of a later
// (UN)SUBSCRIBE, so that the order is Redis's. A subscriber that does not
// read is disconnected as Redis's client-output-buffer-limit pubsub does
// (Config.PubSubHardLimit, PubSubSoftLimit for PubSubSoftFor): its unread
// messages cannot grow the proxy's memory without bound.

// pushQueue is what the hub delivered and the loop has not taken yet.
type pushQueue struct {
	mu     sync.Mutex
	msgs   []pubsub.Message
	size   int64 // their framed size, about
	posted bool  // a takePushes is queued on the loop
	over   bool  // past the hard limit: the connection closes
}

// pushSize is about what m takes framed.
func pushSize(m *pubsub.Message) int64 {
	return int64(len(m.Pattern)+len(m.Channel)+len(m.Payload)) + 48
}

// Deliver queues one message for the client (pubsub.Subscriber). It runs
// on the hub's goroutines, with the hub's lock held: it only queues and
// wakes the loop.
func (lc *clientConn) Deliver(m pubsub.Message) {
	q := &lc.push
	q.mu.Lock()
	if q.over {
		q.mu.Unlock()
		return
	}
	q.msgs = append(q.msgs, m)
	q.size += pushSize(&m)
	if q.size > lc.f.s.cfg.PubSubHardLimit {
		q.over, q.msgs = true, nil // nothing more is read by anyone
	}
	post := !q.posted
	q.posted = true
	q.mu.Unlock()
	if post {
		lc.f.loop.Post(lc.takePushes)
	}
}

// takePushes moves what the hub delivered onto the loop, and writes it
// unless a pipeline is running (its replies go first: finish writes them).
func (lc *clientConn) takePushes() {
	defer lc.recoverPanic()
	over := lc.collectPushes()
	// Between events, never inside a pipeline: it may close connections,
	// this one too.
	lc.f.checkShared()
	if lc.closed {
		return
	}
	if over {
		lc.pushOverflow("client-output-buffer-limit pubsub hard limit")
		return
	}
	if lc.busy || lc.awaitScript || lc.rest != nil {
		// Held until the pipeline's replies are out; they count against
		// the hard limit meanwhile (a RESP3 subscriber blocked in BLPOP).
		if lc.unwritten()+lc.pushedSize > lc.f.s.cfg.PubSubHardLimit {
			lc.pushOverflow("client-output-buffer-limit pubsub hard limit")
		}
		return
	}
	lc.drainPushes()
}

// drainPushes frames the taken messages into lc.out and writes them, a
// chunk at a time while the socket takes them. While it does not, they
// stay taken, unframed: a message's payload is then shared by every
// subscriber that has not read it, as Redis shares it, instead of copied
// into each one's output (100 subscribers that did not read held 100
// copies of every message, gigabytes, and framing them stalled the loop
// for seconds). They count against the output limits all the same. A
// large payload stays shared once framed too (splice.go).
func (lc *clientConn) drainPushes() {
	for i := 0; i < 4 && len(lc.pushed) > 0 && lc.outOff == len(lc.out) && !lc.closed; i++ {
		lc.framePushesUpTo(len(lc.pushed), pushChunk, lc.c.resp3)
		lc.flush()
	}
	if lc.closed || lc.checkPushLimits() {
		return
	}
	lc.setEvents()
}

// pushChunk is how much of the taken messages is framed at a time.
const pushChunk = 256 << 10

// pushesWaiting: taken messages wait for the socket, not for a pipeline.
func (lc *clientConn) pushesWaiting() bool {
	return len(lc.pushed) > 0 && !lc.busy && !lc.awaitScript && lc.rest == nil
}

// collectPushes takes the hub's queue into lc.pushed; true when it went
// over the hard limit.
func (lc *clientConn) collectPushes() (over bool) {
	q := &lc.push
	q.mu.Lock()
	msgs, over := q.msgs, q.over
	q.msgs, q.size, q.posted = nil, 0, false
	q.mu.Unlock()
	if !lc.closed {
		lc.pushed = append(lc.pushed, msgs...)
		for i := range msgs {
			lc.pushedSize += pushSize(&msgs[i])
			lc.f.shared.hold(msgs[i].Payload)
		}
	}
	return over
}

// framePushes appends the taken messages to lc.out as the client's
// protocol frames them, and forgets them.
func (lc *clientConn) framePushes() {
	lc.framePushesUpTo(len(lc.pushed), math.MaxInt, lc.c.resp3)
}

// framePushesUpTo frames at most most taken messages into lc.out, oldest
// first (RESP3 pushes or RESP2 arrays), until the output has grown by at
// least limit bytes, spliced payloads included, or none is left.
func (lc *clientConn) framePushesUpTo(most, limit int, resp3 bool) {
	grown, n := 0, 0
	for n < len(lc.pushed) && n < most && grown < limit {
		m := &lc.pushed[n]
		before := len(lc.out)
		lc.out = appendMessageHead(lc.out, m, resp3)
		lc.appendPayload(m.Payload) // holds it again when spliced
		grown += len(lc.out) - before
		if len(m.Payload) >= spliceMin {
			grown += len(m.Payload)
		}
		lc.pushedSize -= pushSize(m)
		lc.f.shared.drop(m.Payload)
		lc.pushed[n] = pubsub.Message{}
		n++
	}
	lc.pushed = lc.pushed[n:]
	if len(lc.pushed) == 0 {
		lc.pushed, lc.pushedSize = lc.pushed[:0:0], 0
	}
}

// appendMessageHead frames m as Redis does (message, pmessage or
// smessage; an array in RESP2, a push in RESP3) up to its payload: the
// payload's bulk header ends it.
func appendMessageHead(b []byte, m *pubsub.Message, resp3 bool) []byte {
	switch m.Kind {
	case pubsub.Pattern:
		b = resp.AppendPushHeader(b, 4, resp3)
		b = resp.AppendBulkString(b, "pmessage")
		b = resp.AppendBulkString(b, m.Pattern)
	case pubsub.Shard:
		b = resp.AppendPushHeader(b, 3, resp3)
		b = resp.AppendBulkString(b, "smessage")
	default:
		b = resp.AppendPushHeader(b, 3, resp3)
		b = resp.AppendBulkString(b, "message")
	}
	b = resp.AppendBulkString(b, m.Channel)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(m.Payload)), 10)
	return append(b, '\r', '\n')
}

// pushesFirst places the messages delivered so far in the running
// pipeline's replies, before a (UN)SUBSCRIBE's confirmation: a message
// the hub delivered before the command ran comes before its reply, as on
// one Redis. They stay taken, and shared, until finish frames them in
// that place (a renderPushes slot), framed as the client's protocol is
// now: a RESET later in the pipeline changes it for what follows.
func (c *client) pushesFirst() {
	lc := c.conn
	if lc == nil {
		return
	}
	if lc.collectPushes() {
		return // takePushes closes it
	}
	if n := len(lc.pushed) - lc.reserved; n > 0 {
		c.slots = append(c.slots, slot{kind: renderPushes, off: n, resp3: c.resp3})
		lc.reserved += n
	}
}

// checkPushLimits closes a subscriber whose unwritten output is over the
// hard limit, or over the soft limit for longer than PubSubSoftFor; true
// when it did.
func (lc *clientConn) checkPushLimits() bool {
	cfg := &lc.f.s.cfg
	unwritten := lc.unwritten() + lc.pushedSize
	switch {
	case unwritten > cfg.PubSubHardLimit:
		lc.pushOverflow("client-output-buffer-limit pubsub hard limit")
		return true
	case unwritten <= cfg.PubSubSoftLimit:
		lc.softSince = 0
	case lc.softSince == 0:
		lc.softSince = evloop.Now()
	case evloop.Now()-lc.softSince >= int64(cfg.PubSubSoftFor):
		lc.pushOverflow("client-output-buffer-limit pubsub soft limit")
		return true
	}
	return false
}

// pushOverflow disconnects a subscriber that does not read its messages,
// as Redis does: at once, without a reply (it could not read one), and
// nothing more is written to it. A TLS writer gives up the batch it holds
// now: closed, the connection no longer counts it, yet the writer wrote on
// for as long as the client took a piece per write timeout, holding the
// frames' copy and the large payloads it was handed (splice.go).
func (lc *clientConn) pushOverflow(limit string) {
	lc.f.s.pushClosed.Add(1)
	lc.f.s.cfg.Logger.Warn("subscriber does not read its messages fast enough; its connection is closed",
		"client", lc.c.addr, "limit", limit, "hard_bytes", lc.f.s.cfg.PubSubHardLimit,
		"soft_bytes", lc.f.s.cfg.PubSubSoftLimit, "soft_for", lc.f.s.cfg.PubSubSoftFor)
	lc.t.dropWrites()
	lc.close()
}

// leaveHub drops the connection's subscriptions when it closes. Called on
// the loop, with no lock that Deliver takes.
func (lc *clientConn) leaveHub() {
	lc.c.endAllAwaits() // nobody reads the confirmations: the pipeline ends
	if lc.c.subs == 0 || lc.f.s.cfg.Hub == nil {
		return
	}
	lc.f.s.cfg.Hub.Remove(lc)
	lc.c.subs = 0
	lc.push.mu.Lock()
	lc.push.msgs, lc.push.over = nil, true
	lc.push.mu.Unlock()
	lc.dropPushed()
}
