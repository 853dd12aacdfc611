// Package proxy is lockproxy's RESP front end: it accepts Redis clients
// (redcon), answers the connection handshake itself, parses lock commands
// into quorum requests, and writes replies in the order the client sent its
// commands, RESP2 or RESP3.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
}

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
	if cfg.MaxQueryBuffer <= 0 {
		cfg.MaxQueryBuffer = 8 << 20
	}
	if cfg.MaxQueryBuffer < cfg.MaxBulkLen+64 {
		return nil, fmt.Errorf("client_query_buffer_limit (%d) must exceed proto_max_bulk_len (%d): one argument must fit in a command", cfg.MaxQueryBuffer, cfg.MaxBulkLen)
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
	return &Server{
		cfg: cfg, scripts: newScriptTable(cfg.Catalog), start: time.Now(),
		conns: map[*clientConn]struct{}{}, idle: make(chan struct{}), release: make(chan struct{}),
	}, nil
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
	for i := range c.slots {
		c.slots[i] = slot{}
	}
	closeAfter = c.quit
}

// listener wraps each accepted connection in a clientConn.
type listener struct {
	net.Listener
	s *Server
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		l.s.mu.Lock()
		closing := l.s.closing
		l.s.mu.Unlock()
		if closing {
			// redcon closes every connection as soon as Accept fails:
			// hold it until the running pipelines have written their
			// replies.
			<-l.s.release
		}
		return nil, err
	}
	cc := &clientConn{Conn: c, s: l.s}
	cc.g.init(l.s.cfg)
	l.s.mu.Lock()
	l.s.conns[cc] = struct{}{}
	if l.s.closing {
		cc.capWriteDeadline()
	}
	l.s.mu.Unlock()
	return cc, nil
}

// clientConn is a client connection as redcon sees it. Reads pass through
// a RESP guard (respGuard) that enforces the limits
// before redcon's reader, which has none, sees a byte; writes get a
// deadline, so a client that stops reading cannot block its handler
// forever.
type clientConn struct {
	net.Conn
	s   *Server
	set time.Time // when the write deadline was last moved; handler goroutine only
	g   respGuard
}

// Write moves the deadline at most every timeout/4 (it costs a timer
// update): a write always has at least 3/4 of the timeout. Once the
// server shuts down, no write may end later than writeBy.
func (c *clientConn) Write(b []byte) (int, error) {
	if now := time.Now(); c.s.writeBy.Load() == 0 && now.Sub(c.set) > c.s.cfg.WriteTimeout/4 {
		c.Conn.SetWriteDeadline(now.Add(c.s.cfg.WriteTimeout))
		c.set = now
	}
	// Loaded again after moving the deadline: Shutdown stores writeBy
	// before it caps the deadlines, so one of the two wins the cap.
	if wb := c.s.writeBy.Load(); wb != 0 {
		c.Conn.SetWriteDeadline(time.Unix(0, wb))
	}
	return c.Conn.Write(b)
}

// capWriteDeadline interrupts a write blocked on a client that does not
// read, at shutdown. s.mu is held.
func (c *clientConn) capWriteDeadline() {
	c.Conn.SetWriteDeadline(time.Unix(0, c.s.writeBy.Load()))
}

func (c *clientConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// Read hands redcon only complete, well-formed commands within the limits.
// A protocol error is answered once the commands before it have been
// handed out (their replies are flushed by then: redcon reads only after
// flushing), then the connection ends: the stream cannot be trusted past
// it.
func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.g.read(c.Conn, p)
	var pe *ProtocolError
	if errors.As(err, &pe) {
		c.s.protoErr.Add(1)
		c.s.cfg.Logger.Debug("client protocol error; closing its connection", "client", c.RemoteAddr().String(), "err", pe.Msg)
		c.Conn.SetWriteDeadline(time.Now().Add(min(c.s.cfg.WriteTimeout, time.Second)))
		c.Conn.Write([]byte("-ERR Protocol error: " + pe.Msg + "\r\n"))
	}
	return n, err
}

// ProtocolError is a client stream lockproxy will not parse: malformed
// RESP, or a command past the limits. The client gets
// "-ERR Protocol error: <Msg>" and its connection is closed.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

// inlineMax bounds an inline (telnet-style) command line, as Redis does.
const inlineMax = 64 << 10

// respGuard validates the client's byte stream incrementally, with the
// grammar redcon's reader accepts, and hands it on only up to the end of
// the last complete command. redcon re-parses a half-received command on
// every read and trusts declared lengths: a huge bulk length overflows its
// index arithmetic (a panic that kills the process), a huge argument count
// makes it spin, and a command trickled in byte by byte costs it quadratic
// time. Behind the guard it only ever sees whole commands within limits,
// and each is parsed once.
type respGuard struct {
	maxBulk, maxArgs, maxCmd int64

	buf     []byte
	r       int   // buf[r:ok] is validated and not yet handed out
	ok      int   // end of the last complete command
	end     int   // end of the bytes read
	scan    int   // buf[ok:scan] is validated, part of the current command
	st      uint8 // parser state at scan
	num     int64 // the number being read (count or length)
	digits  int
	args    int64 // arguments left in the current command
	bulk    int64 // bytes left in the current argument
	err     error // the stream broke at ok: reported once buf[r:ok] is out
	readErr error // from the connection, reported once buf[r:ok] is out
}

// Parser states.
const (
	stStart   uint8 = iota // at a command boundary
	stInline               // inside an inline command line
	stCount                // digits of *<count>
	stCountLF              // '\n' after the count
	stDollar               // '$' of the next argument
	stLen                  // digits of $<length>
	stLenLF                // '\n' after the length
	stData                 // argument bytes
	stDataCR               // '\r' after the argument
	stDataLF               // '\n' after the argument
)

const guardChunk = 4096

func (g *respGuard) init(cfg Config) {
	g.maxBulk, g.maxArgs, g.maxCmd = int64(cfg.MaxBulkLen), int64(cfg.MaxArgs), int64(cfg.MaxQueryBuffer)
}

// read fills p with validated bytes, reading from rd as needed.
func (g *respGuard) read(rd io.Reader, p []byte) (int, error) {
	for {
		if g.r < g.ok {
			n := copy(p, g.buf[g.r:g.ok])
			g.r += n
			return n, nil
		}
		if g.err != nil {
			return 0, g.err
		}
		if g.readErr != nil {
			return 0, g.readErr
		}
		g.makeRoom()
		n, err := rd.Read(g.buf[g.end:])
		g.end += n
		g.validate()
		if err != nil {
			g.readErr = err
		}
	}
}

// makeRoom drops what was handed out and makes space to read into.
func (g *respGuard) makeRoom() {
	if g.buf == nil {
		g.buf = make([]byte, guardChunk)
	}
	if g.r > 0 {
		n := copy(g.buf, g.buf[g.r:g.end])
		g.ok -= g.r
		g.scan -= g.r
		g.end = n
		g.r = 0
	}
	switch {
	case g.end == 0 && len(g.buf) > 64<<10:
		g.buf = make([]byte, guardChunk) // don't keep a big command's buffer
	case g.end == len(g.buf):
		// Only a command longer than the buffer fills it; validate has
		// bounded it by maxCmd, so this doubles a bounded number of times.
		nb := make([]byte, 2*len(g.buf))
		copy(nb, g.buf[:g.end])
		g.buf = nb
	}
}

// validate advances the parser over buf[scan:end].
func (g *respGuard) validate() {
	b := g.buf[:g.end]
	i := g.scan
	for g.err == nil && i < len(b) {
		c := b[i]
		switch g.st {
		case stStart:
			if c == '*' {
				g.st, g.num, g.digits = stCount, 0, 0
				i++
				continue
			}
			g.st = stInline
			continue // the byte is part of the line
		case stInline:
			nl := bytes.IndexByte(b[i:], '\n')
			if nl < 0 {
				i = len(b)
			} else {
				i += nl
			}
			if i-g.ok > inlineMax {
				g.fail("too big inline request (more than 64 KiB without a newline)")
				continue
			}
			if nl >= 0 {
				i++
				g.complete(i)
			}
			continue
		case stCount, stLen:
			limit, what := g.maxArgs, "multibulk"
			if g.st == stLen {
				limit, what = g.maxBulk, "bulk"
			}
			switch {
			case '0' <= c && c <= '9':
				g.num = g.num*10 + int64(c-'0')
				g.digits++
				if g.num > limit {
					g.fail(fmt.Sprintf("invalid %s length: over %d (%s in config.toml)", what, limit, map[string]string{"bulk": "proto_max_bulk_len", "multibulk": "proto_max_args"}[what]))
					continue
				}
			case c == '\r' && g.digits > 0 && (g.num > 0 || g.st == stLen):
				g.st++ // stCountLF or stLenLF
			default:
				g.fail("invalid " + what + " length")
				continue
			}
		case stCountLF, stLenLF:
			if c != '\n' {
				g.fail("invalid " + map[bool]string{true: "multibulk", false: "bulk"}[g.st == stCountLF] + " length")
				continue
			}
			if g.st == stCountLF {
				g.args, g.st = g.num, stDollar
				break
			}
			g.bulk, g.st = g.num, stData
			if int64(i+1-g.ok)+g.bulk+2 > g.maxCmd {
				g.fail(fmt.Sprintf("command larger than %d bytes (client_query_buffer_limit in config.toml)", g.maxCmd))
				continue
			}
		case stDollar:
			if c != '$' {
				g.fail(fmt.Sprintf("expected '$', got %q", c))
				continue
			}
			g.st, g.num, g.digits = stLen, 0, 0
		case stData:
			k := min(g.bulk, int64(len(b)-i))
			g.bulk -= k
			i += int(k)
			if g.bulk == 0 {
				g.st = stDataCR
			}
			continue
		case stDataCR, stDataLF:
			want := byte('\r')
			if g.st == stDataLF {
				want = '\n'
			}
			if c != want {
				g.fail("expected CRLF after a bulk argument (wrong length?)")
				continue
			}
			if g.st == stDataCR {
				g.st = stDataLF
				break
			}
			g.args--
			if g.args == 0 {
				g.complete(i + 1)
			} else {
				g.st = stDollar
			}
		}
		i++
	}
	if g.err == nil {
		g.scan = i
	}
}

func (g *respGuard) complete(end int) {
	g.ok, g.scan, g.st = end, end, stStart
}

// fail breaks the stream at the current command: the commands before it
// are still handed out, then the error.
func (g *respGuard) fail(msg string) {
	g.err = &ProtocolError{Msg: msg}
	g.end = g.ok
	g.scan = g.ok
}
