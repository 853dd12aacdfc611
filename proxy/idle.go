package proxy

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
)

// Idle and handshake timeouts (Config.IdleTimeout, HandshakeTimeout), for
// every connection, by a sweep on the event loop. A connection is idle while it neither sends a byte nor
// gets a reply; one whose pipeline waits for the masters, or whose replies
// wait for it to read (WriteTimeout governs those), is not. A connection
// is past its handshake once it has authenticated (requirepass set) and
// sent a complete command: until then HandshakeTimeout, counted from its
// accept, bounds it however busy it is, so that silent or unauthenticated
// connections cannot hold max_clients for long. Both close the connection
// without a reply, as Redis's timeout does; pooled clients (go-redis,
// redis-py, ioredis) notice and dial again.

// handshaken reports whether c is past its handshake.
func (c *client) handshaken() bool { return c.authed && c.greeted }

// timedOut counts and logs a connection closed by a timeout.
func (s *Server) timedOut(c *client, addr string) {
	which := "idle_timeout"
	if c != nil && !c.handshaken() {
		which = "handshake_timeout"
		s.handshakeClosed.Add(1)
	} else {
		s.idleClosed.Add(1)
	}
	s.cfg.Logger.Debug("client connection timed out; closed", "client", addr, "timeout", which)
}

// sweepEvery is how often the loop looks for timed-out connections: a
// quarter of the shortest timeout, between 10ms and 1s. A connection is
// closed at most that late (its last activity is known to a sweep).
func (s *Server) sweepEvery() int64 {
	d := time.Second
	for _, t := range []time.Duration{s.cfg.IdleTimeout, s.cfg.HandshakeTimeout} {
		if t > 0 {
			d = min(d, max(t/4, 10*time.Millisecond))
		}
	}
	return int64(d)
}

// timeouts reports whether any timeout is on.
func (s *Server) timeouts() bool { return s.cfg.IdleTimeout > 0 || s.cfg.HandshakeTimeout > 0 }

// armSweep starts the sweep when a connection arrives and none runs.
func (f *front) armSweep(now int64) {
	if f.sweepAt == 0 && f.s.timeouts() {
		f.sweepAt = now + f.s.sweepEvery()
		f.alarm.At(f.sweepAt)
	}
}

// sweep closes the loop's timed-out connections (from Fire) and returns
// when it wants to run next (evloop.Never once no connection is left).
func (f *front) sweep(now int64) int64 {
	switch {
	case f.sweepAt == 0:
		return evloop.Never
	case now < f.sweepAt:
		return f.sweepAt
	}
	idle, hs := int64(f.s.cfg.IdleTimeout), int64(f.s.cfg.HandshakeTimeout)
	for lc := range f.conns {
		if lc.active || lc.busy || lc.outOff < len(lc.out) || lc.c.subs > 0 {
			// Active since the last sweep, waiting for the masters (or
			// blocked in BLPOP), waiting for the client to read, or
			// subscribed (as Redis exempts pub/sub clients): not idle.
			lc.active, lc.last = false, now
		}
		switch {
		case hs > 0 && !lc.c.handshaken() && now-lc.since >= hs: // however busy
		case idle > 0 && now-lc.last >= idle:
		default:
			continue
		}
		f.s.timedOut(lc.c, lc.c.addr)
		lc.close()
	}
	if len(f.conns) == 0 {
		f.sweepAt = 0
		return evloop.Never
	}
	f.sweepAt = now + f.s.sweepEvery()
	return f.sweepAt
}
