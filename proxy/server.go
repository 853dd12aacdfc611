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

	clients atomic.Int64 // connected clients
	nextID  atomic.Int64
	active  sync.WaitGroup // handlers running a pipeline

	mu       sync.Mutex       // protects srvs, closing
	srvs     []*redcon.Server // one per listener (plain, TLS)
	closing  bool
	accepted atomic.Int64
	rejected atomic.Int64
}

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
	if cfg.DefaultTTL < 0 {
		return nil, fmt.Errorf("default_ttl: %v is negative", cfg.DefaultTTL)
	}
	if cfg.DefaultTTL > cfg.Engine.Config().MaxTTL {
		return nil, fmt.Errorf("default_ttl (%v) exceeds quorum.max_ttl (%v)", cfg.DefaultTTL, cfg.Engine.Config().MaxTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil, nil)
	}
	return &Server{cfg: cfg, scripts: newScriptTable(cfg.Catalog), start: time.Now()}, nil
}

// Serve accepts clients on ln until Shutdown. It returns nil after
// Shutdown. It may run on several listeners at once (plain and TLS: pass
// a tls.NewListener).
func (s *Server) Serve(ln net.Listener) error {
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
	return srv.Serve(&deadlineListener{Listener: ln, timeout: s.cfg.WriteTimeout})
}

// Shutdown stops accepting clients, lets every running pipeline finish
// (decisions made, undos queued), then waits for the masters to answer what
// was queued, until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	srvs := s.srvs
	s.mu.Unlock()
	for _, srv := range srvs {
		srv.Close()
	}
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("shutdown: client pipelines still running: %w", ctx.Err())
	}
	return s.cfg.Engine.Drain(ctx)
}

// client is the state of one connection.
type client struct {
	id       int64
	addr     string
	resp3    bool
	authed   bool
	name     string
	lib      string
	libVer   string
	since    time.Time
	w        *quorum.Waiter
	slots    []slot
	localBuf []byte // replies answered by lockproxy itself, by slot
	out      []byte // the pipeline's replies, in order
	quit     bool
}

func (s *Server) accept(conn redcon.Conn) bool {
	if n := s.clients.Add(1); n > int64(s.cfg.MaxClients) {
		s.clients.Add(-1)
		s.rejected.Add(1)
		conn.WriteError("ERR max number of clients reached (max_clients in config.toml)")
		return false
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		s.clients.Add(-1)
		conn.WriteError("ERR lockproxy is shutting down")
		return false
	}
	s.accepted.Add(1)
	s.cfg.Metrics.connections.Inc()
	conn.SetContext(&client{
		id:     s.nextID.Add(1),
		addr:   conn.RemoteAddr(),
		authed: s.cfg.RequirePass == "",
		since:  time.Now(),
		w:      quorum.NewWaiter(),
	})
	return true
}

func (s *Server) closed(conn redcon.Conn, err error) {
	if conn.Context() != nil {
		s.clients.Add(-1)
		s.cfg.Metrics.connections.Dec()
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
	s.active.Add(1)
	defer s.active.Done()
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
	for i := range c.slots {
		c.slots[i] = slot{}
	}
	if c.quit {
		conn.Close()
	}
}

// deadlineListener gives every client connection a write deadline, so a
// client that stops reading cannot block its handler forever.
type deadlineListener struct {
	net.Listener
	timeout time.Duration
}

func (l *deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: c, timeout: l.timeout}, nil
}

type deadlineConn struct {
	net.Conn
	timeout time.Duration
	set     time.Time // when the write deadline was last moved
}

// Write moves the deadline at most every timeout/4 (it costs a timer
// update): a write always has at least 3/4 of the timeout.
func (c *deadlineConn) Write(b []byte) (int, error) {
	if now := time.Now(); now.Sub(c.set) > c.timeout/4 {
		c.Conn.SetWriteDeadline(now.Add(c.timeout))
		c.set = now
	}
	return c.Conn.Write(b)
}
