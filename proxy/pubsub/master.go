package pubsub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// This file is the hub's side of one master: a connection in subscribed
// mode, made again with back-off after any failure, on which every
// subscription the hub holds is made again. Its writer also PINGs, and its
// reader gives up on a master that sent nothing for ReadTimeout (paused,
// or a network that lost the connection without a reset).

var (
	subCmd   = [...]string{Channel: "SUBSCRIBE", Pattern: "PSUBSCRIBE", Shard: "SSUBSCRIBE"}
	unsubCmd = [...]string{Channel: "UNSUBSCRIBE", Pattern: "PUNSUBSCRIBE", Shard: "SUNSUBSCRIBE"}
)

type master struct {
	h     *Hub
	index int
	addr  string
	wake  chan struct{} // capacity 1: out has something to write

	// Guarded by h.mu, so that a subscription change and the decision
	// whether this master hears of it now or at its next connection are
	// one step: either the command is queued on the live connection, or
	// the connection does not exist yet and will resubscribe everything.
	conn net.Conn // nil while down
	out  []byte   // commands queued for conn, written by the writer
	fail bool     // the last connection attempt failed (log once per outage)
	// refused: this connection had a command refused (logged once per
	// connection: a resubscription can be refused hundreds of times).
	refused bool
	// PINGs queued and PONGs read, numbered across connections (a new
	// connection starts with every PING answered); pingQueued: one is in
	// out, not written yet (fence.go).
	pings, pongs uint64
	pingQueued   bool
	// copies of waiting messages read, numbered across connections
	// (order.go).
	copies uint64
	// The replies a PING may get: the master answers every command on
	// this connection, each naming one channel, with exactly one reply
	// in order, and a PING with a pong, or with an error (LOADING while
	// the master loads its dataset: PING may not run then, SUBSCRIBE
	// may). So a PING is answered by the reply whose number is the
	// PING's place among the commands; counting pongs alone left a
	// PING refused with LOADING unanswered for the connection's life,
	// and every later fence on it looked unanswered too. sent: commands
	// queued on this connection; replies: read; pingAt: the places of
	// the PINGs not answered yet, in order.
	sent, replies uint64
	pingAt        []uint64
}

// send queues one command for the live connection, if any. h.mu is held.
func (m *master) send(cmd, name string) {
	if m.conn == nil {
		return
	}
	m.out = resp.AppendCommandString(m.out, cmd, name)
	m.sent++
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// closeConn breaks the live connection, which ends its reader and writer.
// h.mu is held.
func (m *master) closeConn() {
	if m.conn != nil {
		m.conn.Close()
	}
}

func (m *master) run() {
	h := m.h
	backoff := h.cfg.RetryMin
	for {
		conn, rd, err := m.dial()
		if err == nil {
			backoff = h.cfg.RetryMin
			err = m.serve(conn, rd)
		}
		select {
		case <-h.ctx.Done():
			return
		default:
		}
		h.mu.Lock()
		first := !m.fail
		m.fail = true
		h.stats.ConnectErrors++
		h.mu.Unlock()
		if first {
			h.cfg.Logger.Warn("pubsub: subscriber connection to master down; notifications from it are missed until it is back",
				"master", m.addr, "err", err)
		}
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, h.cfg.RetryMax)
	}
}

// dial connects and authenticates. The handshake runs before the
// connection is in subscribed mode, where AUTH would still work but its
// reply would be mixed with messages.
func (m *master) dial() (net.Conn, *resp.Reader, error) {
	h := m.h
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.DialTimeout)
	defer cancel()
	conn, err := h.cfg.Dial(ctx, "tcp", m.addr)
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(h.cfg.DialTimeout))
	unhook := context.AfterFunc(h.ctx, func() { conn.Close() }) // Close interrupts the handshake
	defer unhook()
	hs := resp.AppendAuth(nil, h.cfg.Username, h.cfg.Password)
	n := 1
	if len(hs) > 0 {
		n++
	}
	// The name tells an operator's CLIENT LIST which connections are
	// lockproxy hubs (each counts as one receiver in PUBLISH replies).
	hs = resp.AppendCommandString(hs, "CLIENT", "SETNAME", "lockproxy-pubsub-"+h.cfg.InstanceID)
	rd := subscribedReader(conn, h.cfg.MaxPayload)
	if _, err := conn.Write(hs); err != nil {
		conn.Close()
		return nil, nil, err
	}
	for i := range n {
		p, err := rd.Next()
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("handshake: %w", err)
		}
		// AUTH must succeed, and a NOAUTH says it was needed; a SETNAME
		// refused otherwise (an ACL user without CLIENT) costs only the
		// name.
		if p.Type == resp.Error && ((i == 0 && n == 2) || bytes.HasPrefix(p.Str, []byte("NOAUTH"))) {
			conn.Close()
			return nil, nil, fmt.Errorf("authentication: %s", p.Str)
		}
	}
	conn.SetDeadline(time.Time{})
	return conn, rd, nil
}

// subscribedReader reads what a master sends on a subscribed connection:
// arrays of bulk strings and integers (subscribed-mode replies have at
// most 4 elements, never nested), plus the handshake's status and error
// replies. A payload over maxPayload is skipped without being buffered.
func subscribedReader(conn net.Conn, maxPayload int) *resp.Reader {
	rd := resp.NewReader(conn, 16<<10)
	rd.MaxBulk, rd.MaxElems, rd.MaxDepth = maxPayload, 16, 1
	return rd
}

// serve makes every subscription on conn, then reads until it fails.
func (m *master) serve(conn net.Conn, rd *resp.Reader) error {
	h := m.h
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		conn.Close()
		return ErrClosed
	}
	m.conn, m.refused = conn, false
	m.out, m.sent = h.resubscribe(m.out[:0])
	m.pongs, m.pingQueued = m.pings, false
	m.replies, m.pingAt = 0, m.pingAt[:0]
	if m.fail {
		h.cfg.Logger.Info("pubsub: subscriber connection to master up", "master", m.addr)
	}
	m.fail = false
	h.stats.Connects++
	h.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default: // a wake left over from the last connection does as well
	}

	done := make(chan struct{})
	werr := make(chan error, 1)
	go func() { werr <- m.writeLoop(conn, done) }()
	err := m.readLoop(conn, rd)
	conn.Close()
	close(done)
	if e := <-werr; e != nil && errors.Is(err, net.ErrClosed) {
		err = e
	}

	h.mu.Lock()
	m.conn, m.out = nil, nil
	h.masterDown(m.index)
	h.mu.Unlock()
	return err
}

// resubscribe appends the commands that make every subscription the hub
// holds, the events channel included. One command per name: the master
// answers each name anyway, and an ACL refuses a whole command when one of
// its channels is not allowed, which must not cost the others. h.mu is
// held. It returns the commands and their number.
func (h *Hub) resubscribe(dst []byte) ([]byte, uint64) {
	var n uint64
	for k, r := range h.recs {
		if !r.local {
			dst = resp.AppendCommandString(dst, subCmd[k.kind], k.name)
			n++
		}
	}
	return dst, n
}

// writeLoop writes what send queued, and a PING every PingInterval, until
// done or a write fails.
func (m *master) writeLoop(conn net.Conn, done <-chan struct{}) error {
	h := m.h
	tick := time.NewTicker(h.cfg.PingInterval)
	defer tick.Stop()
	var buf []byte
	for {
		select {
		case <-done:
			return nil
		case <-m.wake:
		case <-tick.C:
			h.mu.Lock()
			m.ping()
			h.mu.Unlock()
		}
		h.mu.Lock()
		buf, m.out = m.out, buf[:0]
		m.pingQueued = false
		h.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		conn.SetWriteDeadline(time.Now().Add(h.cfg.ReadTimeout))
		if _, err := conn.Write(buf); err != nil {
			conn.Close() // ends the reader too
			return err
		}
	}
}

func (m *master) readLoop(conn net.Conn, rd *resp.Reader) error {
	for {
		conn.SetReadDeadline(time.Now().Add(m.h.cfg.ReadTimeout))
		p, err := rd.Next()
		if err != nil {
			return err
		}
		m.h.onPush(m.index, p, rd.Skipped())
	}
}

// onPush handles one reply of master i on its subscribed connection;
// oversize: a payload longer than MaxPayload was skipped.
func (h *Hub) onPush(i int, p resp.Reply, oversize bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	m := h.masters[i]
	if p.Type == resp.Array && len(p.Elems) >= 1 && isMessage(p.Elems[0].Str) {
		h.onMessagePush(i, p.Elems, oversize)
		return
	}
	if m.answered() && (p.Type == resp.Error || p.Type == resp.Status ||
		(p.Type == resp.Array && len(p.Elems) >= 1 && string(p.Elems[0].Str) == "pong")) {
		if p.Type == resp.Error {
			h.stats.PingErrors++ // LOADING: it still answers the PING
		}
		return
	}
	if p.Type == resp.Error {
		// SSUBSCRIBE on a Redis older than 7.0, an ACL user without the
		// channel (Redis 7 users get none by default): that subscription
		// stays unconfirmed on this master.
		h.stats.Refused++
		if !m.refused {
			m.refused = true
			h.cfg.Logger.Warn("pubsub: master refused a subscription command; its messages for it are missed",
				"master", m.addr, "err", string(p.Str))
		}
		return
	}
	if p.Type != resp.Array || len(p.Elems) < 2 {
		return
	}
	e := p.Elems
	switch string(e[0].Str) {
	case "subscribe":
		h.confirm(i, Channel, e[1].Str, true)
	case "psubscribe":
		h.confirm(i, Pattern, e[1].Str, true)
	case "ssubscribe":
		h.confirm(i, Shard, e[1].Str, true)
	case "unsubscribe":
		h.confirm(i, Channel, e[1].Str, false)
	case "punsubscribe":
		h.confirm(i, Pattern, e[1].Str, false)
	case "sunsubscribe":
		h.confirm(i, Shard, e[1].Str, false)
	}
}

func isMessage(kind []byte) bool {
	switch string(kind) {
	case "message", "smessage", "pmessage":
		return true
	}
	return false
}

// onMessagePush handles a message master i sent for a subscription.
func (h *Hub) onMessagePush(i int, e []resp.Reply, oversize bool) {
	if oversize {
		h.stats.Oversize++
		return
	}
	switch {
	case len(e) == 3 && e[0].Str[0] == 'm':
		h.onMessage(i, Channel, "", string(e[1].Str), e[2].Str)
	case len(e) == 3:
		h.onMessage(i, Shard, "", string(e[1].Str), e[2].Str)
	case len(e) == 4:
		h.onMessage(i, Pattern, string(e[1].Str), string(e[2].Str), e[3].Str)
	}
}

// answered counts one reply read (anything but a message) and reports
// whether it answers a PING, which it then counts as that PING's PONG.
// h.mu is held.
func (m *master) answered() bool {
	m.replies++
	if len(m.pingAt) == 0 || m.pingAt[0] > m.replies {
		return false
	}
	m.pingAt = m.pingAt[1:]
	m.pongs++
	return true
}

// confirm records that master i now does (or no longer does) send the
// messages of a subscription: only a confirmed master owes dedup a copy.
func (h *Hub) confirm(i int, kind Kind, name []byte, on bool) {
	k := recKey{kind, string(name)}
	if !on {
		h.leftOn(i, k)
	}
	r := h.recs[k]
	if r == nil {
		return
	}
	if on {
		r.confirmed |= 1 << i
		h.wakeConfirmed(r)
	} else {
		r.confirmed &^= 1 << i
	}
}

// leftOn records that master i no longer counts the dropped
// subscription k. h.mu is held.
func (h *Hub) leftOn(i int, k recKey) {
	if b, ok := h.leaving[k]; ok {
		if b &^= 1 << i; b == 0 {
			delete(h.leaving, k)
			if k.kind == Pattern {
				delete(h.leavingPats, k.name)
			}
		} else {
			h.leaving[k] = b
		}
	}
}

// masterDown forgets what master i was subscribed to and what it owed:
// what it publishes after it is back is new (it lost the rest).
func (h *Hub) masterDown(i int) {
	for _, r := range h.recs {
		r.confirmed &^= 1 << i
	}
	for k := range h.leaving {
		h.leftOn(i, k)
	}
	h.dd.masterDown(i)
}
