// Package proxy is lockproxy's RESP front end: it serves Redis clients on
// an event loop (plain TCP and TLS alike), answers the connection handshake
// itself, parses each client command into one quorum operation, and renders
// its outcome as RESP2 or RESP3, in the order the client sent its commands.
// Every reply and error text a client reads is written here, but for
// INFO's sections (proxy/ops) and the reason a script is not run
// (proxy/catalog), which the error here quotes.
//
// The connections are conn.go, front.go, transport.go, idle.go and
// guard.go; the commands, commands.go and the files they name. The script
// catalog is proxy/catalog, the operator's view (metrics, INFO's sections,
// master probes) proxy/ops.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// Server is the RESP front end.
type Server struct {
	cfg        Config
	scripts    *catalog.Table
	txBodies   txBodies              // the scripts EXEC runs (transaction.go)
	understood *catalog.Understander // scripts the catalog does not know, by what they do
	start      time.Time
	maxTTL     time.Duration // the engine's, read on every acquisition
	drift      float64       // the engine's clock drift factor
	minTTL     time.Duration // shortest accounted TTL that leaves validity (minTTLFor)

	clients atomic.Int64 // connected clients
	nextID  atomic.Int64

	// loop runs every client connection (Config.Loop, else the engine's,
	// else the Server's own: ownLoop).
	loop    *evloop.Loop
	ownLoop bool

	mu      sync.Mutex // protects the fields below
	closing bool
	active  int           // connections running a pipeline
	idle    chan struct{} // closed when closing and active == 0

	// writeBy, once shutting down, is the latest write deadline of any
	// client (unix ns): a client that does not read cannot hold the
	// shutdown longer than shutdownWriteGrace.
	writeBy  atomic.Int64
	accepted atomic.Int64
	rejected atomic.Int64
	protoErr atomic.Int64 // connections closed for a protocol error

	idleClosed, handshakeClosed atomic.Int64 // connections closed by IdleTimeout, HandshakeTimeout
	sharedBytes                 atomic.Int64 // pub/sub payloads subscribers share and have not written (sharedpush.go)
	pushClosed                  atomic.Int64 // subscribers closed over the pubsub output limits
	writeClosed                 atomic.Int64 // clients closed for not reading their replies (WriteTimeout)
	yields                      atomic.Int64 // pipelines cut at turnQuantum, gone on at a later turn
	blockedN                    atomic.Int64 // clients blocked in BLPOP/BRPOP
	repushes                    atomic.Int64 // elements put back for BLPOP clients that hung up
	popRounds                   atomic.Int64 // BLPOP pop rounds in flight
	budget                      *resp.Budget // client_query_buffer_total

	frontState // the clients on the event loop (front.go)
}

// shutdownWriteGrace bounds writing the last replies at shutdown.
const shutdownWriteGrace = time.Second

// New validates cfg and returns a Server; Serve starts it.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil || cfg.Catalog == nil {
		return nil, errors.New("proxy: Engine and Catalog are required")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	drift := cfg.Engine.Config().DriftFactor
	s := &Server{
		cfg: cfg, scripts: catalog.NewTable(cfg.Catalog, cfg.LearnedScripts), txBodies: findTxBodies(cfg.Catalog), start: time.Now(), maxTTL: cfg.Engine.Config().MaxTTL,
		understood: catalog.NewUnderstander(cfg.Engine.Config().MaxTTL, cfg.Engine.Config().DriftFactor),
		drift:      drift, minTTL: minTTLFor(drift),
		idle:   make(chan struct{}),
		budget: resp.NewBudget(cfg.MaxInputTotal),
	}
	if s.loop = cfg.Loop; s.loop == nil {
		s.loop = cfg.Engine.Loop()
	}
	if s.loop == nil {
		l, err := evloop.New(cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("proxy: starting the event loop: %w", err)
		}
		s.loop, s.ownLoop = l, true
	}
	return s, nil
}

// Serve accepts clients on ln until Shutdown, and returns nil after
// Shutdown. It may run on several listeners at once (plain and TLS: pass a
// tls.NewListener). Every client is served on the event loop: a plain TCP
// socket polled by the loop itself, others (TLS) through a reader and a
// writer goroutine (transport.go).
func (s *Server) Serve(ln net.Listener) error { return s.serveOn(ln) }

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
	if first {
		s.understood.Close()
		s.writeBy.Store(time.Now().Add(shutdownWriteGrace).UnixNano())
		if s.active == 0 {
			close(s.idle)
		}
	}
	s.mu.Unlock()
	var err error
	if lerr := s.stopLoopClients(ctx.Done()); lerr != nil {
		err = fmt.Errorf("shutdown: %v: %w", lerr, ctx.Err())
	}
	select {
	case <-s.idle:
	case <-ctx.Done():
		err = fmt.Errorf("shutdown: client pipelines still running: %w", ctx.Err())
	}
	if err != nil {
		return err
	}
	if err := s.cfg.Engine.Drain(ctx); err != nil {
		return &DrainError{Err: err}
	}
	if s.ownLoop && first {
		s.loop.Close()
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
	// tracking: CLIENT TRACKING ON OPTIN, where nothing is tracked
	// (tracking.go).
	tracking bool
	tx       *txState // WATCH and MULTI (transaction.go); nil: none
	since    time.Time
	w        *quorum.Waiter
	slots    []slot
	// localBuf holds replies answered by lockproxy itself, by slot; out,
	// the pipeline's replies, in order.
	localBuf, out []byte
	// charge is what the pipeline's requests whose replies carry a value
	// count against outputPauseAt (valueReplyCharge each).
	charge  int
	quit    bool
	greeted bool // sent a complete command (HandshakeTimeout)
	// scriptsFlushed stamps this connection's last SCRIPT FLUSH (0: none):
	// it sees only the scripts loaded after it (catalog.Table).
	scriptsFlushed uint64
	// resume, for a connection that must not block (on the event loop),
	// is how an analysis tells it to go on: then a command that needs one
	// sets deferred and the connection runs it again once told. nil: the
	// command waits for the analysis.
	resume   func()
	deferred bool
	// analysis is the one deferred on, until resumed: a connection that
	// closes meanwhile leaves it (catalog.Understander.Leave).
	analysis *catalog.Analysis
	// conn is the connection this client is (pub/sub's Subscriber, the
	// blocked BLPOP's). blocking: a BLPOP parked the pipeline; the
	// commands after it run once it is answered.
	conn     *clientConn
	blocking bool
	barrier  bool // a BLPOP waits for the commands before it (blocking.go)
	// Subscriptions, as the last confirmation counted them: channels and
	// patterns, shard channels, and their sum (RESP2 subscribed mode
	// while > 0).
	chanSubs, shardSubs, subs int
	// awaits are the running pipeline's subscriptions waiting for the
	// masters' confirmation (awaitConfirmed). Loop only.
	awaits []confirmWait
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
	s.cfg.Metrics.ConnOpened()
	return ""
}

// gone counts an admitted connection out.
func (s *Server) gone() {
	s.clients.Add(-1)
	s.cfg.Metrics.ConnClosed()
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
