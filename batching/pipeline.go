// Package batching coalesces the commands of all of lockproxy's connections
// into pipelined writes, one ordered connection per master.
//
// A Pipeline owns one TCP connection to one master. Submit only appends to a
// queue; one writer goroutine drains whatever has accumulated into a single
// write as soon as the previous write is out (load makes batches, idleness
// makes no delay: there is no timer), and one reader goroutine parses replies
// and hands each to its operation's Completer in the order the commands were
// written. Because there is exactly one connection and one writer, commands
// reach the master in the order they were submitted: an undo submitted after
// an acquisition can never overtake it.
//
// The package knows nothing of locks: it moves commands and replies.
package batching

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Completer receives the outcome of one submitted command: the master's
// reply, or err when no reply will come (connection lost, expired before it
// was written). It is called exactly once per accepted Op, from the
// pipeline's goroutines: it must not block.
type Completer interface {
	Complete(master int, r resp.Reply, err error)
}

// Op is one command for one master.
type Op struct {
	Cmd      []byte    // the RESP-encoded command; not modified
	Deadline int64     // Now() after which it is not worth writing; 0: always written
	C        Completer // told the outcome; nil: fire and forget
	written  int64     // Now() when the writer wrote it, for OnReply
}

// Sentinel errors; a MasterError wraps them with the master's address.
var (
	ErrQueueFull = errors.New("queue full (master too slow to keep up)")
	ErrExpired   = errors.New("deadline passed before the command was written")
	ErrClosed    = errors.New("pipeline closed")
	ErrStalled   = errors.New("no reply for too long")
)

// MasterError says which master failed and why.
type MasterError struct {
	Addr string
	Err  error
}

func (e *MasterError) Error() string { return "master " + e.Addr + ": " + e.Err.Error() }
func (e *MasterError) Unwrap() error { return e.Err }

// DefaultQueueBytes is Options.QueueBytes's default: 32 MiB.
const DefaultQueueBytes = 32 << 20

// SmallCommand is the size up to which a command is not held to
// Options.QueueBytes.
const SmallCommand = 4 << 10

// Now is the monotonic clock in nanoseconds, the one Op.Deadline uses (the
// event loop's clock).
func Now() int64 { return evloop.Now() }

// Options configure a Pipeline. Zero values get the documented defaults.
type Options struct {
	Addr  string // host:port of the master
	Index int    // passed back to Completer.Complete
	// QueueLimit bounds the commands waiting to be written; past it Submit
	// fails fast with ErrQueueFull. Default 65536.
	QueueLimit int
	// QueueBytes bounds the bytes of the commands waiting to be written,
	// likewise: a paused master's queue of large commands (a DEL of big
	// keys) is memory lockproxy holds until the master is declared down.
	// Default DefaultQueueBytes. A command alone in the queue, and a
	// command of at most SmallCommand bytes, are accepted past it (only
	// QueueLimit bounds them): every lock command, release and undo is
	// that small, and large commands must not crowd them out.
	QueueBytes int
	// DialTimeout bounds connecting and the Init commands. Default 1s.
	DialTimeout time.Duration
	// StallTimeout closes a connection that has replies outstanding and
	// has read nothing for this long, and a write blocked this long. A
	// paused master shorter than this keeps its connection (and its order).
	// Default 10s.
	StallTimeout time.Duration
	// Dial connects; default net.Dialer. Set it for TLS.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Username and Password authenticate every new connection (AUTH
	// [username] password, before Init); empty Password: no AUTH. They
	// are values, encoded here only, and sent once per connection: a
	// NOSCRIPT reload does not repeat them.
	Username, Password string
	// Init are commands sent on every new connection, after AUTH and
	// before any Op (SCRIPT LOAD…). An error reply fails the connection
	// attempt. They are sent again after a NOSCRIPT reply, so that
	// scripts flushed on the master are loaded again.
	Init [][]byte
	// CheckVersion, when set, is asked on every new connection, after AUTH
	// and before Init, with the version the master reported in INFO
	// server: an error refuses the connection (the master counts as down,
	// and is redialled with back-off, so an upgrade in place is picked
	// up). Nil: the version is not read.
	CheckVersion func(index int, v ServerVersion) error
	// OnState is told when the connection goes up or down (err says why).
	OnState func(index int, up bool, err error)
	// OnBatch is told the size of each write, for metrics.
	OnBatch func(index int, ops int)
	// OnReply is told each reply's round trip, from the write of its
	// batch to the read of its reply, for metrics. It must not block.
	OnReply func(index int, rtt time.Duration)
	// Loop, when set, drives plain TCP connections (not TLS ones): the
	// commands queued while the loop handles an iteration's events are
	// written in one go after them, and replies are read and completed on
	// the loop (see loopconn.go). nil: a writer and a reader goroutine.
	Loop   *evloop.Loop
	Logger *slog.Logger
}

// Pipeline is one master's ordered, batched connection.
type Pipeline struct {
	opt  Options
	wake chan struct{} // cap 1: the queue went from empty to non-empty
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the writer goroutine exits

	mu      sync.Mutex // protects the fields below
	queue   []Op       // submitted, not yet written
	qbytes  int        // the bytes of queue's commands
	up      bool       // a connection is established; Submit accepts
	lastErr error      // why the master is down
	closed  bool
	flusher *loopConn // the connection the loop drives; nil in goroutine mode or while down
	// broken: the connection failed and its in-flight ops are being told;
	// Submit refuses from then on (up is cleared once run() has logged it),
	// so once a waiter heard the error the master counts as down.
	broken bool

	// version is what the last connection's INFO server said (nil: not
	// read yet, or CheckVersion unset).
	version atomic.Pointer[ServerVersion]

	inflight fifo // written, awaiting replies; own lock
	// completing counts ops taken off inflight whose Completer has not
	// returned yet: Depth includes them, so a caller that waits for
	// Depth to reach zero also waits for what those Completers submit
	// (the undo of a failed acquisition, queued from its late reply).
	completing atomic.Int64
}

// New starts a pipeline; it connects in the background and keeps
// reconnecting with back-off until Close.
func New(opt Options) *Pipeline {
	if opt.QueueLimit <= 0 {
		opt.QueueLimit = 65536
	}
	if opt.QueueBytes <= 0 {
		opt.QueueBytes = DefaultQueueBytes
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = time.Second
	}
	if opt.StallTimeout <= 0 {
		opt.StallTimeout = 10 * time.Second
	}
	if opt.Dial == nil {
		d := &net.Dialer{KeepAlive: 15 * time.Second}
		opt.Dial = d.DialContext
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	p := &Pipeline{
		opt:     opt,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		lastErr: errors.New("not connected yet"),
	}
	go p.run()
	return p
}

// Addr is the master's address.
func (p *Pipeline) Addr() string { return p.opt.Addr }

// Version is the master's version as its last connection read it (the
// zero ServerVersion: not read yet, or Options.CheckVersion unset). It is
// kept while the master is down: the version that was refused, or the last
// one that served.
func (p *Pipeline) Version() ServerVersion {
	if v := p.version.Load(); v != nil {
		return *v
	}
	return ServerVersion{}
}

// Up reports whether the master is connected, and otherwise why not.
func (p *Pipeline) Up() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up, p.lastErr
}

// Stalled reports how long the master has left its oldest written command
// unanswered, at now (0: nothing in flight). A paused or overloaded master
// is stalled for as long as it stays so, whatever is queued behind.
func (p *Pipeline) Stalled(now int64) time.Duration {
	if w := p.inflight.oldest.Load(); w != 0 && now > w {
		return time.Duration(now - w)
	}
	return 0
}

// Depth is the number of commands queued and in flight.
func (p *Pipeline) Depth() (queued, inflight int) {
	p.mu.Lock()
	queued = len(p.queue)
	p.mu.Unlock()
	return queued, p.inflight.len() + int(p.completing.Load())
}

// Submit queues op for the master. It never blocks and never calls op.C
// itself: when it returns an error (master down, queue full, closed) the
// op was not accepted and the caller accounts for it.
func (p *Pipeline) Submit(op Op) error {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return &MasterError{p.opt.Addr, ErrClosed}
	case !p.up || p.broken:
		err := p.lastErr
		p.mu.Unlock()
		return &MasterError{p.opt.Addr, fmt.Errorf("down (%w); redialling", err)}
	case len(p.queue) >= p.opt.QueueLimit || (len(op.Cmd) > SmallCommand && len(p.queue) > 0 && p.qbytes+len(op.Cmd) > p.opt.QueueBytes):
		p.mu.Unlock()
		return &MasterError{p.opt.Addr, ErrQueueFull}
	}
	p.queue = append(p.queue, op)
	p.qbytes += len(op.Cmd)
	first := len(p.queue) == 1
	lc := p.flusher
	p.mu.Unlock()
	if lc != nil {
		if first {
			lc.loop.Kick(lc)
		}
		return nil
	}
	if first {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Close stops the pipeline: queued and in-flight commands complete with
// ErrClosed. Callers that need in-flight work finished wait for it first.
func (p *Pipeline) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.quit)
	<-p.done
}

// run connects, serves the connection until it fails, and reconnects with
// back-off, until Close.
func (p *Pipeline) run() {
	defer close(p.done)
	backoff := 50 * time.Millisecond
	for {
		conn, err := p.connect()
		if err == nil {
			backoff = 50 * time.Millisecond
			if tc, ok := conn.(*net.TCPConn); ok && p.opt.Loop != nil {
				err = p.serveLoop(tc) // up once the loop has it
			} else {
				p.setState(true, nil)
				err = p.serve(conn)
				conn.Close()
			}
		}
		p.setState(false, err)
		if p.isClosed() {
			return
		}
		select {
		case <-p.quit:
			p.failQueued(&MasterError{p.opt.Addr, ErrClosed})
			return
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

func (p *Pipeline) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// markBroken makes Submit refuse before the in-flight ops of a failed
// connection are told, so that none is accepted for a connection already
// known dead.
func (p *Pipeline) markBroken(err error) {
	p.mu.Lock()
	p.broken = true
	p.lastErr = err
	p.mu.Unlock()
}

// setState records the connection state; going down fails every queued
// command with the same error (the first error wins, every waiter hears it).
// OnState hears of a connection going up before Submit accepts anything
// for it: whatever it decides about the master (the engine stops counting
// a reconnected master's votes until it is checked) applies to the first
// reply. Only the pipeline's own goroutine calls setState.
func (p *Pipeline) setState(up bool, err error) {
	p.mu.Lock()
	changed := p.up != up
	p.mu.Unlock()
	if up && changed {
		if v := p.version.Load(); v != nil {
			p.opt.Logger.Info("master connected", "master", p.opt.Addr, "server", v.String())
		} else {
			p.opt.Logger.Info("master connected", "master", p.opt.Addr)
		}
		if p.opt.OnState != nil {
			p.opt.OnState(p.opt.Index, true, nil)
		}
	}
	p.mu.Lock()
	p.up = up
	if up {
		p.broken = false
	} else {
		if p.closed {
			err = ErrClosed
		}
		p.lastErr = err
	}
	p.mu.Unlock()
	if up {
		return
	}
	p.failQueued(&MasterError{p.opt.Addr, err})
	if changed {
		if errors.Is(err, ErrClosed) {
			p.opt.Logger.Info("master connection closed (shutdown)", "master", p.opt.Addr)
		} else {
			p.opt.Logger.Warn("master down: its votes count as no until it is back; lockproxy redials with back-off",
				"master", p.opt.Addr, "err", err)
		}
		if p.opt.OnState != nil {
			p.opt.OnState(p.opt.Index, false, err)
		}
	}
}

func (p *Pipeline) failQueued(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue, p.qbytes = nil, 0
	p.mu.Unlock()
	for _, op := range q {
		if op.C != nil {
			op.C.Complete(p.opt.Index, resp.Reply{}, err)
		}
	}
}
