package pubsub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
)

// DialFunc connects to a master (quorum.Config.Dial has this shape; TLS
// masters get a TLS dialer).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config configures a Hub. Zero values get the documented defaults; the
// defaults are defined here only.
type Config struct {
	// Masters are host:port of the masters, in the engine's order: a
	// master's index in Receivers' replies is its place here. 1..16.
	Masters []string
	// Dial connects to a master; default plain TCP. Set it for TLS.
	Dial DialFunc
	// Username and Password authenticate each subscriber connection
	// (AUTH [username] password) before it subscribes. Empty Password: no
	// AUTH.
	Username, Password string
	// Publisher sends lockproxy's own events to every master (Emit). nil:
	// Emit fails with ErrNoPublisher; the hub still receives other
	// proxies' events.
	Publisher Publisher
	// Logger receives master connection changes; default text on stderr.
	Logger *slog.Logger
	// InstanceID names this hub in the ids of its events and in its
	// connections' CLIENT SETNAME on the masters. It must differ between
	// proxies and between two runs of one proxy; default 16 random hex
	// digits, which is both.
	InstanceID string
	// EventsChannel is where proxies publish their events. Default
	// "lockproxy:events". Clients may not subscribe to or publish on it.
	EventsChannel string

	// DialTimeout bounds connecting and the handshake (AUTH, SETNAME).
	// Default 1s.
	DialTimeout time.Duration
	// RetryMin and RetryMax bound the back-off between reconnection
	// attempts to one master; it doubles from RetryMin after each failure.
	// Defaults 50ms and 2s.
	RetryMin, RetryMax time.Duration
	// PingInterval is how often an idle subscriber connection sends PING,
	// so that a silent master is told from a quiet one. Default 1s.
	PingInterval time.Duration
	// ReadTimeout: a connection that has read nothing for this long is
	// closed and made again. It must exceed PingInterval, and it is kept
	// under DedupWindow so that a paused master's backlog (messages older
	// than the window, which dedup could no longer recognize) is dropped
	// with the old connection rather than delivered a second time.
	// Default 3s.
	ReadTimeout time.Duration

	// MaxChannels bounds the distinct channels, patterns and shard
	// channels the hub holds for its subscribers; each is one
	// subscription on every master. Past it Subscribe fails with
	// ErrTooManyChannels. Default 10,000.
	MaxChannels int
	// MaxPerSubscriber bounds one subscriber's channels, patterns and
	// shard channels together (ErrSubscriberLimit). It may not exceed
	// MaxChannels, and is kept well below it so that one connection cannot
	// take every channel and lock the other subscribers (lock waiters)
	// out: it takes ten to fill the hub. Default MaxChannels/10 (1,000),
	// at least 1.
	MaxPerSubscriber int
	// MaxSubscriptions bounds the (subscriber, channel) pairs of the hub
	// (ErrTooManySubscriptions). Default 100,000.
	MaxSubscriptions int
	// MaxPatterns bounds the distinct patterns among MaxChannels
	// (ErrTooManyPatterns), and MaxPatternsPerSubscriber one
	// subscriber's (ErrSubscriberPatternLimit); a pattern is at most
	// MaxPatternLen (256) bytes (ErrPatternTooLong). Every PUBLISH is
	// matched against each held pattern, and against each dropped one
	// whose UNSUBSCRIBE a master has not confirmed (at most MaxPatterns
	// more), under the hub's lock on the event loop, in time linear in
	// the channel (glob.go): about 15µs for a 4 KiB channel and the worst
	// pattern on one core, so 2 × 1,000 patterns bound a PUBLISH's
	// matching to some 30ms. MaxPatterns may not exceed MaxChannels, nor
	// MaxPatternsPerSubscriber MaxPatterns. Defaults 1,000 and
	// MaxPatterns/10 (100), at least 1.
	MaxPatterns, MaxPatternsPerSubscriber int

	// DedupWindow is how long a delivered message waits for the copies of
	// the other masters (doc.go). A copy later than this is delivered
	// again. Default 5s.
	DedupWindow time.Duration
	// MaxDedupEntries bounds the messages remembered for dedup, about 100
	// bytes each whatever the payload (they keep a hash). Past it the
	// oldest is forgotten early. Default 65,536.
	MaxDedupEntries int
	// MaxPayload: a message from a master with a longer channel or payload
	// is skipped without being buffered, and counted. Default 1 MiB.
	MaxPayload int
	// MaxEventOrigins bounds the proxies whose event ids are remembered;
	// past it the one heard from least recently is forgotten. Default 1,024.
	MaxEventOrigins int

	// KeyspaceEvents is the initial notify-keyspace-events value (Redis
	// syntax, "KEA", "Egx"…), for the notifications the hub synthesizes
	// from lockproxy's events. Default "": none, as in Redis.
	KeyspaceEvents string
	// DriftFactor is the engine's clock drift factor: a synthesized
	// expired comes ttl + ttl*DriftFactor + 2ms after the set it follows.
	// Default 0.01.
	DriftFactor float64
	// MaxExpiries bounds the keys whose expiry is scheduled; past it a new
	// key gets no expired notification (counted). Default 100,000.
	MaxExpiries int

	// Quorum is how many masters' copies deliver a message at once
	// (hold.go): the engine's quorum. Default len(Masters)/2 + 1.
	Quorum int
	// HoldBack delivers a message this long after its first copy when
	// fewer than Quorum masters sent one. Default 50ms, the engine's
	// default node_timeout; give it the node_timeout in force.
	HoldBack time.Duration
	// MaxHeldBytes bounds what held messages keep; past it a new message
	// is delivered on its first copy. Default 64 MiB.
	MaxHeldBytes int64
}

// maxMasters is the width of the masks that record which masters a
// subscription is confirmed on and which owe a copy of a message.
const maxMasters = 16

func (c *Config) validate() error {
	if len(c.Masters) < 1 || len(c.Masters) > maxMasters {
		return fmt.Errorf("pubsub: %d masters given, 1 to %d supported", len(c.Masters), maxMasters)
	}
	if c.Dial == nil {
		d := &net.Dialer{}
		c.Dial = d.DialContext
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.InstanceID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.InstanceID = hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(c.InstanceID, " \r\n") {
		return errors.New("pubsub: InstanceID may not contain spaces or line breaks")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.EventsChannel == "" {
		c.EventsChannel = "lockproxy:events"
	}
	defDur(&c.DialTimeout, time.Second)
	defDur(&c.RetryMin, 50*time.Millisecond)
	defDur(&c.RetryMax, 2*time.Second)
	defDur(&c.PingInterval, time.Second)
	defDur(&c.ReadTimeout, 3*time.Second)
	defDur(&c.DedupWindow, 5*time.Second)
	def(&c.MaxChannels, 10_000)
	def(&c.MaxPerSubscriber, max(1, c.MaxChannels/10))
	def(&c.MaxSubscriptions, 100_000)
	def(&c.MaxPatterns, min(1_000, c.MaxChannels))
	def(&c.MaxPatternsPerSubscriber, max(1, c.MaxPatterns/10))
	def(&c.MaxDedupEntries, 65_536)
	def(&c.MaxPayload, 1<<20)
	def(&c.MaxEventOrigins, 1024)
	def(&c.MaxExpiries, 100_000)
	def(&c.Quorum, len(c.Masters)/2+1)
	defDur(&c.HoldBack, 50*time.Millisecond)
	if c.MaxHeldBytes == 0 {
		c.MaxHeldBytes = 64 << 20
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = 0.01
	}
	switch {
	case c.ReadTimeout <= c.PingInterval:
		return fmt.Errorf("pubsub: ReadTimeout (%v) must exceed PingInterval (%v)", c.ReadTimeout, c.PingInterval)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("pubsub: back-off %v..%v is not a range", c.RetryMin, c.RetryMax)
	case c.DedupWindow < 0 || c.DriftFactor < 0 || c.DriftFactor >= 0.5:
		return errors.New("pubsub: DedupWindow and DriftFactor may not be negative (DriftFactor < 0.5)")
	case c.MaxChannels < 0 || c.MaxPerSubscriber < 0 || c.MaxSubscriptions < 0 || c.MaxPatterns < 0 || c.MaxPatternsPerSubscriber < 0 ||
		c.MaxDedupEntries < 0 || c.MaxPayload < 0 || c.MaxEventOrigins < 0 || c.MaxExpiries < 0:
		return errors.New("pubsub: limits may not be negative")
	case c.MaxPerSubscriber > c.MaxChannels:
		return fmt.Errorf("pubsub: MaxPerSubscriber (%d) exceeds MaxChannels (%d): one subscriber could take every channel", c.MaxPerSubscriber, c.MaxChannels)
	case c.MaxPatterns > c.MaxChannels:
		return fmt.Errorf("pubsub: MaxPatterns (%d) exceeds MaxChannels (%d)", c.MaxPatterns, c.MaxChannels)
	case c.MaxPatternsPerSubscriber > c.MaxPatterns:
		return fmt.Errorf("pubsub: MaxPatternsPerSubscriber (%d) exceeds MaxPatterns (%d): one subscriber could take every pattern", c.MaxPatternsPerSubscriber, c.MaxPatterns)
	}
	if _, err := ParseKeyspaceEvents(c.KeyspaceEvents); err != nil {
		return err
	}
	return nil
}
