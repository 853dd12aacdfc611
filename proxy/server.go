// Package proxy is lockproxy's RESP front end: it accepts Redis clients
// (redcon), answers the connection handshake itself, parses lock commands
// into quorum requests, and writes replies in the order the client sent its
// commands, RESP2 or RESP3.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Config configures a Server. Zero values get the documented defaults.
type Config struct {
	// Engine decides every lock operation. Required.
	Engine *quorum.Engine
	// Catalog recognizes lock scripts. Required.
	Catalog *Catalog
	// RequirePass, when set, must be given with AUTH or HELLO … AUTH
	// before any other command.
	RequirePass string
	// DefaultTTL is the TTL of SETNX and SET NX without expiry; 0 refuses
	// them (a lock that never expires is never safe to take).
	DefaultTTL time.Duration
	// MaxClients bounds client connections; past it a new connection gets
	// an error and is closed. Default 10000.
	MaxClients int
	// WriteTimeout bounds writing replies to a client: a client that does
	// not read is disconnected rather than holding the proxy. Default 10s.
	WriteTimeout time.Duration
	// MaxBulkLen bounds one argument of a client command (key, token,
	// script body), in bytes. Default 1 MiB: lock commands carry short
	// keys and tokens, and the longest legitimate argument is a script
	// body of a few KiB (Redis allows 512 MiB: proto-max-bulk-len).
	MaxBulkLen int
	// MaxArgs bounds the arguments of one command, its name included.
	// Default 65536: far above any lock command (a DEL or EXISTS of many
	// keys), low enough that a forged count cannot make lockproxy allocate
	// or loop much (Redis: 1M, fixed).
	MaxArgs int
	// MaxQueryBuffer bounds one command as sent, framing included, in
	// bytes. A command is buffered until it is complete, so with
	// MaxClients this bounds the memory clients can make lockproxy hold.
	// Default 8 MiB (Redis: client-query-buffer-limit, 1 GiB).
	MaxQueryBuffer int
	// MaxInputTotal bounds the memory all connections together hold in
	// input buffers: unfinished commands, commands read ahead, and for
	// TLS clients redcon's copy; past it the connection holding the most
	// is closed with an error naming client_query_buffer_total. Default
	// 128 MiB; at least 4 × MaxQueryBuffer, so that the longest command
	// fits beside others.
	MaxInputTotal int64
	// LearnedScripts bounds the sha1s of reformatted catalogued scripts
	// that clients EVALed or loaded, which then answer EVALSHA: the least
	// recently used is dropped past it (its client gets NOSCRIPT and falls
	// back to EVAL). The catalog's own sha1s always stay. Default 10000.
	LearnedScripts int
	// DenyForce refuses catalogued scripts marked Force, which take a lock
	// whoever holds it (rueidislock's force acquisition): config
	// allow_force_acquire = false. Default false: allowed, as on one Redis.
	DenyForce bool
	// IdleTimeout closes a connection that has neither sent a byte nor
	// been sent a reply for this long, unless its pipeline waits for the
	// masters or its replies wait for it to read; 0: never (Redis's
	// timeout 0). config.toml's default is 10 minutes.
	IdleTimeout time.Duration
	// HandshakeTimeout closes a connection that has not, this long after
	// it was accepted, authenticated (when RequirePass is set) and sent a
	// complete command, however busy it is: silent or unauthenticated
	// connections cannot hold MaxClients for long. 0: never.
	// config.toml's default is 10s.
	HandshakeTimeout time.Duration
	// ConfigFile, Version and Commit are shown by INFO.
	ConfigFile string
	Version    string
	Commit     string
	// Metrics receives counters (NewMetrics); nil: counted, not exposed.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Server is the RESP front end.
type Server struct {
	cfg     Config
	scripts *scriptTable
	start   time.Time
	maxTTL  time.Duration // the engine's, read on every acquisition
	drift   float64       // the engine's clock drift factor
	minTTL  time.Duration // shortest accounted TTL that leaves validity (minTTLFor)

	clients atomic.Int64 // connected clients
	nextID  atomic.Int64

	mu      sync.Mutex       // protects the fields below
	srvs    []*redcon.Server // one per listener (plain, TLS)
	conns   map[*clientConn]struct{}
	closing bool
	active  int           // handlers running a pipeline
	idle    chan struct{} // closed when closing and active == 0
	release chan struct{} // closed when Shutdown lets redcon close the idle connections

	// writeBy, once shutting down, is the latest write deadline of any
	// client (unix ns): a client that does not read cannot hold the
	// shutdown longer than shutdownWriteGrace.
	writeBy  atomic.Int64
	accepted atomic.Int64
	rejected atomic.Int64
	protoErr atomic.Int64 // connections closed for a protocol error

	idleClosed, handshakeClosed atomic.Int64 // connections closed by IdleTimeout, HandshakeTimeout
	budget                      *inputBudget // client_query_buffer_total

	frontState // plain TCP clients on the event loop (loopfront.go)
}

// defaultMaxInputTotal is Config.MaxInputTotal's default: 128 MiB, far
// above what lock clients hold (a few KiB each; 10000 idle connections
// hold 40 MiB of 4 KiB buffers), and a bound the process survives.
const defaultMaxInputTotal = 128 << 20

// shutdownWriteGrace bounds writing the last replies at shutdown.
const shutdownWriteGrace = time.Second

// New validates cfg and returns a Server; Serve starts it.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil || cfg.Catalog == nil {
		return nil, errors.New("proxy: Engine and Catalog are required")
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 10000
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.MaxBulkLen <= 0 {
		cfg.MaxBulkLen = 1 << 20
	}
	if cfg.MaxArgs <= 0 {
		cfg.MaxArgs = 1 << 16
	}
	if cfg.LearnedScripts <= 0 {
		cfg.LearnedScripts = defaultLearnedScripts
	}
	if cfg.MaxQueryBuffer <= 0 {
		cfg.MaxQueryBuffer = 8 << 20
	}
	if cfg.MaxInputTotal <= 0 {
		cfg.MaxInputTotal = defaultMaxInputTotal
	}
	if cfg.MaxInputTotal < 4*int64(cfg.MaxQueryBuffer) {
		return nil, fmt.Errorf("client_query_buffer_total (%d) must be at least 4 × client_query_buffer_limit (%d): the longest command, with what is read ahead and the TLS reader's copy, must fit beside others", cfg.MaxInputTotal, cfg.MaxQueryBuffer)
	}
	if cfg.MaxQueryBuffer < cfg.MaxBulkLen+64 {
		return nil, fmt.Errorf("client_query_buffer_limit (%d) must exceed proto_max_bulk_len (%d): one argument must fit in a command", cfg.MaxQueryBuffer, cfg.MaxBulkLen)
	}
	if cfg.IdleTimeout < 0 || cfg.HandshakeTimeout < 0 {
		return nil, fmt.Errorf("idle_timeout (%v) and handshake_timeout (%v) must not be negative (0 turns them off)", cfg.IdleTimeout, cfg.HandshakeTimeout)
	}
	if cfg.DefaultTTL < 0 {
		return nil, fmt.Errorf("default_ttl: %v is negative", cfg.DefaultTTL)
	}
	if cfg.DefaultTTL > cfg.Engine.Config().MaxTTL {
		return nil, fmt.Errorf("default_ttl (%v) exceeds quorum.max_ttl (%v)", cfg.DefaultTTL, cfg.Engine.Config().MaxTTL)
	}
	drift := cfg.Engine.Config().DriftFactor
	if cfg.DefaultTTL > 0 && quorum.Validity(cfg.DefaultTTL, 0, drift) <= 0 {
		return nil, fmt.Errorf("default_ttl (%v) leaves no validity after the clock drift allowance (2ms + TTL × quorum.clock_drift_factor %g): it must be at least %v", cfg.DefaultTTL, drift, minTTLFor(drift))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil, nil)
	}
	return &Server{
		cfg: cfg, scripts: newScriptTable(cfg.Catalog, cfg.LearnedScripts), start: time.Now(), maxTTL: cfg.Engine.Config().MaxTTL,
		drift: drift, minTTL: minTTLFor(drift),
		conns: map[*clientConn]struct{}{}, idle: make(chan struct{}), release: make(chan struct{}),
		budget: newInputBudget(cfg.MaxInputTotal),
	}, nil
}

// Serve accepts clients on ln until Shutdown. It returns nil after
// Shutdown. It may run on several listeners at once (plain and TLS: pass
// a tls.NewListener). Clients of a plain TCP listener are served on the
// engine's event loop when it has one (loopclient.go), others by redcon
// with a goroutine each.
func (s *Server) Serve(ln net.Listener) error {
	if tl, ok := ln.(*net.TCPListener); ok && s.cfg.Engine.Loop() != nil {
		return s.serveLoop(tl)
	}
	srv := redcon.NewServerNetwork("tcp", ln.Addr().String(), s.handle, s.accept, s.closed)
	srv.AcceptError = func(err error) {
		s.cfg.Logger.Warn("accept failed; retrying", "err", err)
		time.Sleep(5 * time.Millisecond) // back off on e.g. EMFILE
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.srvs = append(s.srvs, srv)
	s.mu.Unlock()
	return srv.Serve(&listener{Listener: ln, s: s})
}

// Shutdown stops accepting clients and lets every running pipeline finish:
// its decisions made, its replies written (within shutdownWriteGrace) and
// its undos queued; connections are closed as their pipelines end, idle
// ones at once. Then it waits for the masters to answer what was queued
// (undos included), until ctx ends. Commands that arrive after Shutdown
// began get "-ERR lockproxy is shutting down" and never reach a master.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closing
	s.closing = true
	srvs := s.srvs
	if first {
		s.writeBy.Store(time.Now().Add(shutdownWriteGrace).UnixNano())
		for c := range s.conns {
			c.capWriteDeadline()
		}
		if s.active == 0 {
			close(s.idle)
		}
	}
	s.mu.Unlock()
	for _, srv := range srvs {
		srv.Close() // stops accepting; redcon closes its connections once released
	}
	var err error
	if lerr := s.stopLoopClients(ctx.Done()); lerr != nil {
		err = fmt.Errorf("shutdown: %v: %w", lerr, ctx.Err())
	}
	select {
	case <-s.idle:
	case <-ctx.Done():
		err = fmt.Errorf("shutdown: client pipelines still running: %w", ctx.Err())
	}
	s.mu.Lock()
	if first {
		close(s.release)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.cfg.Engine.Drain(ctx); err != nil {
		return &DrainError{Err: err}
	}
	return nil
}

// DrainError means every client was answered, but commands already sent
// to some masters (undos, the tail of acquisitions) were not confirmed
// before the deadline: those masters are paused or unreachable. Nothing is
// half-acquired: what they hold expires by its TTL.
type DrainError struct{ Err error }

func (e *DrainError) Error() string {
	return "commands to paused or unreachable masters not confirmed (their keys expire by TTL): " + e.Err.Error()
}
func (e *DrainError) Unwrap() error { return e.Err }

// ProtocolErrors is the number of client connections closed for a
// protocol error or a limit (proto_max_bulk_len, proto_max_args,
// client_query_buffer_limit), for INFO and metrics.
func (s *Server) ProtocolErrors() int64 { return s.protoErr.Load() }

// enter registers a running pipeline; false once shutting down.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.active++
	return true
}

// leave ends a pipeline; it reports whether the server is shutting down,
// in which case the caller closes its connection.
func (s *Server) leave() (closing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.closing && s.active == 0 {
		close(s.idle)
	}
	return s.closing
}

// client is the state of one connection.
type client struct {
	id     int64
	addr   string
	resp3  bool
	authed bool
	name   string
	lib    string
	libVer string
	since  time.Time
	w      *quorum.Waiter
	slots  []slot
	// localBuf holds replies answered by lockproxy itself, by slot; out,
	// the pipeline's replies, in order.
	localBuf, out []byte
	quit          bool
	greeted       bool // sent a complete command (HandshakeTimeout)
	// scriptsFlushed stamps this connection's last SCRIPT FLUSH (0: none):
	// it sees only the scripts loaded after it (scriptTable).
	scriptsFlushed uint64
}

func (s *Server) accept(conn redcon.Conn) bool {
	if msg := s.admit(); msg != "" {
		conn.WriteError(msg)
		return false
	}
	c := s.newClient(conn.RemoteAddr(), quorum.NewWaiter())
	if cc, ok := conn.NetConn().(*clientConn); ok {
		// Read by the connection's goroutine, started after this.
		cc.g.authed, cc.c = &c.authed, c
	}
	conn.SetContext(c)
	return true
}

// admit counts a new connection in, or returns the error it gets (max
// clients, shutting down) and counts it out.
func (s *Server) admit() (reject string) {
	if n := s.clients.Add(1); n > int64(s.cfg.MaxClients) {
		s.clients.Add(-1)
		s.rejected.Add(1)
		return "ERR max number of clients reached (max_clients in config.toml)"
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		s.clients.Add(-1)
		return "ERR lockproxy is shutting down"
	}
	s.accepted.Add(1)
	s.cfg.Metrics.connections.Inc()
	return ""
}

// gone counts an admitted connection out.
func (s *Server) gone() {
	s.clients.Add(-1)
	s.cfg.Metrics.connections.Dec()
}

func (s *Server) newClient(addr string, w *quorum.Waiter) *client {
	return &client{
		id:     s.nextID.Add(1),
		addr:   addr,
		authed: s.cfg.RequirePass == "",
		since:  time.Now(),
		w:      w,
	}
}

func (s *Server) closed(conn redcon.Conn, err error) {
	if conn.Context() != nil {
		s.gone()
	}
}

// handle runs a client's whole pipeline: every command already read is
// parsed and submitted before any is waited for, so a pipelined client's
// commands travel to the masters together; replies are written in order and
// flushed once (by redcon, when handle returns).
func (s *Server) handle(conn redcon.Conn, first redcon.Command) {
	c, _ := conn.Context().(*client)
	if c == nil {
		return
	}
	if !s.enter() {
		// Shutting down: nothing more reaches a master. One error per
		// command, so that a pipelining client sees every reply.
		conn.WriteError("ERR lockproxy is shutting down")
		for range conn.ReadPipeline() {
			conn.WriteError("ERR lockproxy is shutting down")
		}
		conn.Close()
		return
	}
	closeAfter := false
	defer func() {
		if s.leave() || closeAfter {
			conn.Close() // flushes the replies first
		}
	}()
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Error("panic serving a client; its connection is closed, others are unaffected",
				"client", c.addr, "panic", p, "stack", string(debug.Stack()))
			conn.WriteError("ERR internal error in lockproxy; the connection is closed")
			conn.Close()
		}
	}()
	c.w.Reset()
	c.slots = c.slots[:0]
	c.localBuf = c.localBuf[:0]
	s.command(c, first.Args)
	for _, cmd := range conn.ReadPipeline() {
		if c.quit {
			break
		}
		s.command(c, cmd.Args)
	}
	s.cfg.Engine.Wait(c.w)
	out := c.out[:0]
	for i := range c.slots {
		out = s.render(out, c, &c.slots[i])
	}
	conn.WriteRaw(out)
	c.out = out[:0]
	if cap(c.out) > 1<<20 || cap(c.localBuf) > 1<<20 {
		c.out, c.localBuf = nil, nil // don't keep a burst's buffers
	}
	c.w.Reset()
	c.releaseSlots()
	closeAfter = c.quit
}
