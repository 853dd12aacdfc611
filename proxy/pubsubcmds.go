package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// Pub/sub commands, through the hub (proxy/pubsub): SUBSCRIBE, PSUBSCRIBE
// and SSUBSCRIBE with their UN forms, PUBLISH and SPUBLISH sent to every
// master, RESET, and Redis's subscribed mode for RESP2 clients.

// errNoHub is the reply when lockproxy runs without a hub: config.toml's
// [pubsub] enabled = false (or, in tests, a Server built without
// Config.Hub). It says how to turn it on.
const errNoHub = "ERR pub/sub is not available on this lockproxy: it runs without its hub ([pubsub] enabled = false in its config.toml); SUBSCRIBE, PUBLISH, BLPOP/BRPOP and keyspace notifications need enabled = true"

// subKind maps a command to its namespace and the confirmation's name.
var subKinds = map[string]struct {
	kind  pubsub.Kind
	unsub bool
	reply string
}{
	"subscribe":    {pubsub.Channel, false, "subscribe"},
	"psubscribe":   {pubsub.Pattern, false, "psubscribe"},
	"ssubscribe":   {pubsub.Shard, false, "ssubscribe"},
	"unsubscribe":  {pubsub.Channel, true, "unsubscribe"},
	"punsubscribe": {pubsub.Pattern, true, "punsubscribe"},
	"sunsubscribe": {pubsub.Shard, true, "sunsubscribe"},
}

// subscribedAllowed are the commands a RESP2 client in subscribed mode may
// send, as in Redis 7.
var subscribedAllowed = map[string]bool{
	"subscribe": true, "psubscribe": true, "ssubscribe": true,
	"unsubscribe": true, "punsubscribe": true, "sunsubscribe": true,
	"ping": true, "quit": true, "reset": true,
}

// subscribedRefusal is Redis's error for another command in RESP2
// subscribed mode, or "".
func subscribedRefusal(c *client, name []byte) string {
	if c.subs == 0 || c.resp3 || subscribedAllowed[string(name)] {
		return ""
	}
	return "ERR Can't execute '" + clip(name) + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
}

func cmdSubscribe(s *Server, c *client, args [][]byte) {
	hub := s.cfg.Hub
	if hub == nil || c.conn == nil {
		c.errorf(errNoHub)
		return
	}
	name := strings.ToLower(string(args[0]))
	k := subKinds[name]
	c.pushesFirst()
	confirm := func(ch []byte, count int) {
		resp3 := c.resp3
		c.local(func(b []byte) []byte {
			b = resp.AppendPushHeader(b, 3, resp3)
			b = resp.AppendBulkString(b, k.reply)
			if ch == nil {
				b = resp.AppendNull(b, resp3)
			} else {
				b = resp.AppendBulk(b, ch)
			}
			return resp.AppendInt(b, int64(count))
		})
	}
	if !k.unsub {
		for _, ch := range args[1:] {
			if len(ch) > maxChannelName {
				c.errorf("ERR channel or pattern name of %d bytes is longer than lockproxy's limit of %d bytes", len(ch), maxChannelName)
				continue
			}
			count, err := hub.Subscribe(c.conn, k.kind, string(ch))
			if err != nil {
				c.errorf("%s", subscribeError(err, ch))
				continue
			}
			c.setSubs(k.kind, count)
			confirm(ch, count)
			s.awaitConfirmed(c, k.kind, string(ch))
			if k.kind == pubsub.Channel {
				s.learnExpiry(c, ch)
			}
		}
		return
	}
	names := args[1:]
	if len(names) == 0 {
		for _, n := range hub.Subscriptions(c.conn, k.kind) {
			names = append(names, []byte(n))
		}
		if len(names) == 0 {
			confirm(nil, c.subsOf(k.kind))
			return
		}
	}
	for _, ch := range names {
		count := hub.Unsubscribe(c.conn, k.kind, string(ch))
		// A subscription made earlier in this pipeline is gone: its
		// confirmation is no longer worth waiting for (nor would it come
		// once the hub dropped the name).
		c.endAwaits(k.kind, string(ch))
		// After Unsubscribe no message of ch is delivered: those before
		// it go out before its confirmation, as on one Redis.
		c.pushesFirst()
		c.setSubs(k.kind, count)
		confirm(ch, count)
	}
}

// maxChannelName bounds a channel or pattern name: each is kept by the hub
// and by every master, and sent again on every reconnection. Lock
// libraries' channels are lock names with a prefix.
const maxChannelName = 4096

// subscribeWait bounds how long a subscription's confirmation waits for
// the masters' (awaitConfirmed): it is reached only when fewer than a
// quorum of masters are healthy, when no lock can be released anyway.
const subscribeWait = time.Second

// awaitConfirmed holds the pipeline (and with it the client's
// confirmation) until a quorum of masters confirmed the subscription, so
// that a client told it is subscribed hears every release made after:
// each release runs on a quorum, which includes a confirmed master.
//
// An UNSUBSCRIBE of the name or a RESET later in the same pipeline ends the
// wait (endAwaits): the hub forgets a name nobody subscribes to, so its
// confirmation would never come, and the client no longer needs it.
func (s *Server) awaitConfirmed(c *client, kind pubsub.Kind, name string) {
	var fired atomic.Bool
	w := c.w
	done := func() {
		if fired.CompareAndSwap(false, true) {
			w.Unhold()
		}
	}
	w.Hold()
	cancel := s.cfg.Hub.AwaitConfirmed(kind, name, s.cfg.Engine.Q(), done)
	if fired.Load() {
		return
	}
	t := time.AfterFunc(subscribeWait, func() { cancel(); done() })
	end := func() {
		t.Stop()
		cancel()
		done()
	}
	c.awaits = append(c.awaits, confirmWait{kind: kind, name: name, end: end})
}

// confirmWait is a subscription of the running pipeline whose
// confirmation the pipeline waits for (awaitConfirmed).
type confirmWait struct {
	kind pubsub.Kind
	name string
	end  func() // stops waiting; a no-op once the wait ended
}

// endAwaits ends the pipeline's waits for the subscription (kind, name).
func (c *client) endAwaits(kind pubsub.Kind, name string) {
	for i := range c.awaits {
		if a := &c.awaits[i]; a.end != nil && a.kind == kind && a.name == name {
			a.end()
			a.end = nil
		}
	}
}

// endAllAwaits ends every wait of the pipeline (RESET, a closed
// connection).
func (c *client) endAllAwaits() {
	for i := range c.awaits {
		if a := &c.awaits[i]; a.end != nil {
			a.end()
		}
		c.awaits[i] = confirmWait{}
	}
	c.awaits = c.awaits[:0]
}

// keyspaceChannel is the prefix of a lock key's keyspace channel.
const keyspaceChannel = "__keyspace@0__:"

// learnExpiry covers a lock granted before this proxy heard of it (it
// started later, or its notifications were off): when a client subscribes
// to the key's keyspace channel, the key's quorum PTTL schedules its
// expired notification, unless an event already did.
func (s *Server) learnExpiry(c *client, ch []byte) {
	key, ok := bytes.CutPrefix(ch, []byte(keyspaceChannel))
	if !ok || len(key) == 0 || !s.cfg.Hub.KeyspaceOn() || c.conn == nil {
		return
	}
	hub, loop, held, drift := s.cfg.Hub, c.conn.f.loop, c.w, s.drift
	var r *quorum.Request
	held.Hold() // the client's pipeline waits for the read: no flood of them
	start := evloop.Now()
	w := quorum.NewWaiterFunc(func() {
		loop.Post(func() {
			if rep, err := r.Result(); err == nil && rep.Type == resp.Integer && rep.Int >= 0 {
				// PTTL is the holder's figure: aged since the read was
				// sent, less the drift. The notification must come once
				// the lock is surely gone: add both back, and the drift
				// once more, as a grant's comes TTL + drift after it.
				left := time.Duration(rep.Int) * time.Millisecond
				left += time.Duration(evloop.Now()-start) + 2*quorum.Drift(left, drift)
				hub.ScheduleExpiryIfNone(string(key), left)
			}
			r.Release()
			held.Unhold()
		})
	})
	key = append([]byte(nil), key...)
	r = s.cfg.Engine.PTTL(key, 0)
	s.cfg.Engine.Submit(w, r)
}

// subscribeError is the client's text for a refused subscription.
func subscribeError(err error, ch []byte) string {
	if msg := patternRefusal(err, ch); msg != "" {
		return msg
	}
	switch {
	case errors.Is(err, pubsub.ErrReserved):
		return "ERR channel '" + clip(ch) + "' is reserved for lockproxy's own events; pick another channel name"
	case errors.Is(err, pubsub.ErrSubscriberLimit):
		return "ERR too many subscriptions on this connection (pubsub.max_per_connection in config.toml); unsubscribe some or use a pattern"
	case errors.Is(err, pubsub.ErrTooManySubscriptions):
		return "ERR too many subscriptions on this lockproxy (pubsub.max_subscriptions in config.toml); retry later or raise the limit"
	case errors.Is(err, pubsub.ErrTooManyChannels):
		return "ERR too many distinct channels and patterns on this lockproxy (pubsub.max_channels in config.toml); retry later or raise the limit"
	case errors.Is(err, pubsub.ErrClosed):
		return "ERR lockproxy is shutting down"
	}
	return "ERR subscribe failed: " + err.Error()
}

// setSubs records the count a confirmation carries: channels and patterns
// together, or shard channels.
func (c *client) setSubs(kind pubsub.Kind, count int) {
	if kind == pubsub.Shard {
		c.shardSubs = count
	} else {
		c.chanSubs = count
	}
	c.subs = c.chanSubs + c.shardSubs
}

func (c *client) subsOf(kind pubsub.Kind) int {
	if kind == pubsub.Shard {
		return c.shardSubs
	}
	return c.chanSubs
}

// cmdPublish sends PUBLISH or SPUBLISH to every master, each of whose
// subscribers (lockproxy's hubs among them) receive it; the hubs deliver
// it once. The reply is Hub.Receivers over the masters' counts.
func cmdPublish(s *Server, c *client, args [][]byte) {
	hub := s.cfg.Hub
	if hub == nil {
		c.errorf(errNoHub)
		return
	}
	if len(args[1]) > maxChannelName {
		c.errorf("ERR channel name of %d bytes is longer than lockproxy's limit of %d bytes", len(args[1]), maxChannelName)
		return
	}
	if hub.Reserved(string(args[1])) {
		c.errorf("ERR channel '%s' is reserved for lockproxy's own events; pick another channel name", clip(args[1]))
		return
	}
	cmd := "PUBLISH"
	kind := pubsub.Channel
	if len(args[0]) > 0 && (args[0][0] == 's' || args[0][0] == 'S') {
		cmd, kind = "SPUBLISH", pubsub.Shard
	}
	// The hub's part of the masters' counts before any of them runs it:
	// a master may still count a subscription the hub drops meanwhile.
	own := hub.Own(kind, string(args[1]))
	r := s.cfg.Engine.Broadcast(cmd, args[1], args[2], evloop.Now())
	if kind == pubsub.Channel {
		r.SetMasterWork(hub.PatternWork(len(args[1]))) // shard channels match no pattern
	}
	c.slots = append(c.slots, slot{req: r, kind: renderPublish, resp3: c.resp3,
		pub: &publishSlot{kind: kind, channel: string(args[1]), own: own}})
	s.cfg.Engine.Submit(c.w, r)
}

// publishSlot is what a PUBLISH's reply needs besides the masters' counts.
type publishSlot struct {
	kind    pubsub.Kind
	channel string
	own     pubsub.Owned // the hub's part of each master's count when it was sent
}

// renderPublished is a PUBLISH's reply: the receivers over the masters.
func (s *Server) renderPublished(out []byte, sl *slot) []byte {
	rep, err := sl.req.Result()
	var nq *quorum.NoQuorumError
	if errors.As(err, &nq) {
		return resp.AppendError(out, publishedNowhereText(nq))
	}
	if err != nil {
		return resp.AppendError(out, errorText(err))
	}
	if rep.Type == resp.Error {
		return resp.AppendError(out, string(rep.Str))
	}
	return resp.AppendInt(out, s.cfg.Hub.Receivers(sl.pub.kind, sl.pub.channel, sl.req.Replies(), sl.pub.own))
}

// publishedNowhereText is a PUBLISH's reply when no master answered it in
// node_timeout: it was not refused, only not confirmed, and it is still
// written to each master however late (so subscribers may get it), which a
// client that retries must know.
func publishedNowhereText(nq *quorum.NoQuorumError) string {
	var b strings.Builder
	b.WriteString(errPrefixNoQuorum + " none of " + strconv.Itoa(nq.N) + " masters confirmed the PUBLISH within node_timeout; it is still sent to each and may be delivered late, so retry only if a duplicate message is harmless")
	writeMisses(&b, nq)
	return b.String()
}

// cmdReset is Redis's RESET: the connection as new (unsubscribed, RESP2,
// no name, authenticated again if a password is required).
func cmdReset(s *Server, c *client, args [][]byte) {
	if c.subs > 0 && s.cfg.Hub != nil && c.conn != nil {
		s.cfg.Hub.Remove(c.conn) // then nothing more is delivered
		c.endAllAwaits()
		c.pushesFirst()
		c.chanSubs, c.shardSubs, c.subs = 0, 0, 0
	}
	c.resp3 = false
	c.name = ""
	c.tracking = false
	c.tx = nil
	c.authed = s.cfg.RequirePass == ""
	c.status("RESET")
}

// pingSubscribed is PING in RESP2 subscribed mode: ["pong", arg or ""].
func pingSubscribed(c *client, args [][]byte) {
	arg := []byte{}
	if len(args) == 2 {
		arg = args[1]
	}
	c.local(func(b []byte) []byte {
		b = resp.AppendArrayHeader(b, 2)
		b = resp.AppendBulkString(b, "pong")
		return resp.AppendBulk(b, arg)
	})
}

// pubsubInfo is INFO's pubsub figures; nil without a hub.
func (s *Server) pubsubInfo() *ops.PubSub {
	hub := s.cfg.Hub
	if hub == nil {
		return nil
	}
	return &ops.PubSub{Stats: hub.Stats(), KeyspaceEvents: hub.KeyspaceEvents(), OutputLimitCloses: s.pushClosed.Load()}
}

// configSet is CONFIG SET notify-keyspace-events <flags>: it sets which
// keyspace notifications this proxy synthesizes from lockproxy's events
// (proxy/pubsub). The masters' own setting is not touched, and other
// proxies keep theirs (config.toml's pubsub.notify_keyspace_events gives
// every proxy the same from the start). Any other parameter is refused:
// the proxy is configured by config.toml.
func configSet(s *Server, c *client, args [][]byte) {
	if len(args) < 4 || len(args)%2 != 0 {
		c.errorf("ERR wrong number of arguments for 'config|set' command")
		return
	}
	for i := 2; i < len(args); i += 2 {
		if p := strings.ToLower(string(args[i])); p != "notify-keyspace-events" {
			c.errorf("ERR CONFIG SET '%s' is not supported: lockproxy accepts CONFIG SET notify-keyspace-events only; everything else is set in config.toml", clip(args[i]))
			return
		}
	}
	hub := s.cfg.Hub
	if hub == nil {
		c.errorf(errNoHub)
		return
	}
	val := string(args[len(args)-1])
	if err := hub.SetKeyspaceEvents(val); err != nil {
		// Redis 7.0's text for a bad value.
		c.errorf("ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")
		return
	}
	s.cfg.Logger.Info("notify-keyspace-events set by a client: this proxy now synthesizes those notifications for lock keys; the masters' setting and other proxies' are unchanged",
		"client", c.addr, "value", hub.KeyspaceEvents())
	c.status("OK")
}
