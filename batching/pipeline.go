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
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"time"
)

// Completer receives the outcome of one submitted command: the master's
// reply, or err when no reply will come (connection lost, expired before it
// was written). It is called exactly once per accepted Op, from the
// pipeline's goroutines: it must not block.
type Completer interface {
	Complete(master int, r Reply, err error)
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

var epoch = time.Now()

// Now is the monotonic clock in nanoseconds, the one Op.Deadline uses.
func Now() int64 { return int64(time.Since(epoch)) }

// Options configure a Pipeline. Zero values get the documented defaults.
type Options struct {
	Addr  string // host:port of the master
	Index int    // passed back to Completer.Complete
	// QueueLimit bounds the commands waiting to be written; past it Submit
	// fails fast with ErrQueueFull. Default 65536.
	QueueLimit int
	// DialTimeout bounds connecting and the Init commands. Default 1s.
	DialTimeout time.Duration
	// StallTimeout closes a connection that has replies outstanding and
	// has read nothing for this long, and a write blocked this long. A
	// paused master shorter than this keeps its connection (and its order).
	// Default 10s.
	StallTimeout time.Duration
	// Dial connects; default net.Dialer. Set it for TLS.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Init are commands sent on every new connection before any Op (AUTH,
	// SCRIPT LOAD…). An error reply fails the connection attempt. They are
	// sent again after a NOSCRIPT reply, so that scripts flushed on the
	// master are loaded again.
	Init [][]byte
	// OnState is told when the connection goes up or down (err says why).
	OnState func(index int, up bool, err error)
	// OnBatch is told the size of each write, for metrics.
	OnBatch func(index int, ops int)
	// OnReply is told each reply's round trip, from the write of its
	// batch to the read of its reply, for metrics. It must not block.
	OnReply func(index int, rtt time.Duration)
	Logger  *slog.Logger
}

// Pipeline is one master's ordered, batched connection.
type Pipeline struct {
	opt  Options
	wake chan struct{} // cap 1: the queue went from empty to non-empty
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the writer goroutine exits

	mu      sync.Mutex // protects the fields below
	queue   []Op       // submitted, not yet written
	up      bool       // a connection is established; Submit accepts
	lastErr error      // why the master is down
	closed  bool

	inflight fifo // written, awaiting replies; own lock
}

// New starts a pipeline; it connects in the background and keeps
// reconnecting with back-off until Close.
func New(opt Options) *Pipeline {
	if opt.QueueLimit <= 0 {
		opt.QueueLimit = 65536
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

// Up reports whether the master is connected, and otherwise why not.
func (p *Pipeline) Up() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up, p.lastErr
}

// Depth is the number of commands queued and in flight.
func (p *Pipeline) Depth() (queued, inflight int) {
	p.mu.Lock()
	queued = len(p.queue)
	p.mu.Unlock()
	return queued, p.inflight.len()
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
	case !p.up:
		err := p.lastErr
		p.mu.Unlock()
		return &MasterError{p.opt.Addr, fmt.Errorf("down (%w); redialling", err)}
	case len(p.queue) >= p.opt.QueueLimit:
		p.mu.Unlock()
		return &MasterError{p.opt.Addr, ErrQueueFull}
	}
	p.queue = append(p.queue, op)
	first := len(p.queue) == 1
	p.mu.Unlock()
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
			p.setState(true, nil)
			err = p.serve(conn)
			conn.Close()
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

// setState records the connection state; going down fails every queued
// command with the same error (the first error wins, every waiter hears it).
func (p *Pipeline) setState(up bool, err error) {
	p.mu.Lock()
	changed := p.up != up
	p.up = up
	if !up {
		if p.closed {
			err = ErrClosed
		}
		p.lastErr = err
	}
	p.mu.Unlock()
	if !up {
		p.failQueued(&MasterError{p.opt.Addr, err})
	}
	if changed {
		switch {
		case up:
			p.opt.Logger.Info("master connected", "master", p.opt.Addr)
		case errors.Is(err, ErrClosed):
			p.opt.Logger.Info("master connection closed (shutdown)", "master", p.opt.Addr)
		default:
			p.opt.Logger.Warn("master down: its votes count as no until it is back; lockproxy redials with back-off",
				"master", p.opt.Addr, "err", err)
		}
		if p.opt.OnState != nil {
			p.opt.OnState(p.opt.Index, up, err)
		}
	}
}

func (p *Pipeline) failQueued(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, op := range q {
		if op.C != nil {
			op.C.Complete(p.opt.Index, Reply{}, err)
		}
	}
}

// connect dials and runs the Init commands synchronously.
func (p *Pipeline) connect() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opt.DialTimeout)
	defer cancel()
	conn, err := p.opt.Dial(ctx, "tcp", p.opt.Addr)
	if err != nil {
		return nil, err
	}
	if len(p.opt.Init) == 0 {
		return conn, nil
	}
	conn.SetDeadline(time.Now().Add(p.opt.DialTimeout))
	var buf []byte
	for _, c := range p.opt.Init {
		buf = append(buf, c...)
	}
	if _, err := conn.Write(buf); err != nil {
		conn.Close()
		return nil, err
	}
	rb := make([]byte, 0, 4096)
	for i := 0; i < len(p.opt.Init); {
		r, n, err := parseReply(rb, 0)
		if err == errIncomplete {
			if len(rb) == cap(rb) {
				rb = append(rb, 0)[:len(rb)]
			}
			m, rerr := conn.Read(rb[len(rb):cap(rb)])
			if rerr != nil {
				conn.Close()
				return nil, fmt.Errorf("reading init replies: %w", rerr)
			}
			rb = rb[:len(rb)+m]
			continue
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
		if r.Type == Error {
			conn.Close()
			return nil, fmt.Errorf("init command %q failed: %s", firstWords(p.opt.Init[i]), r.Str)
		}
		rb = rb[n:]
		i++
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// firstWords renders the command name and first argument of an encoded
// command, never its secrets (AUTH passwords are cut).
func firstWords(cmd []byte) string {
	parts := bytes.Split(cmd, []byte("\r\n"))
	var words []string
	for i := 2; i < len(parts) && len(words) < 2; i += 2 {
		words = append(words, string(parts[i]))
	}
	if len(words) > 0 && bytes.EqualFold([]byte(words[0]), []byte("AUTH")) {
		return "AUTH ***"
	}
	return fmt.Sprint(words)
}

// serve runs the writer on this goroutine and the reader on another until
// either fails or the pipeline closes.
func (p *Pipeline) serve(conn net.Conn) error {
	readErr := make(chan error, 1)
	go func() { readErr <- p.readLoop(conn) }()
	err, readerDone := p.writeLoop(conn, readErr)
	conn.Close() // unblocks the reader
	if !readerDone {
		if rerr := <-readErr; err == nil || errors.Is(err, net.ErrClosed) {
			err = rerr
		}
	}
	// Whatever was written and not answered will not be answered.
	for _, op := range p.inflight.drain() {
		if op.C != nil {
			op.C.Complete(p.opt.Index, Reply{}, &MasterError{p.opt.Addr, err})
		}
	}
	return err
}

// writeLoop writes batches until an error; readerDone reports that the
// error came from the reader, which has then exited.
func (p *Pipeline) writeLoop(conn net.Conn, readErr <-chan error) (err error, readerDone bool) {
	var (
		spare []Op
		buf   []byte
	)
	for {
		select {
		case <-p.wake:
		case err := <-readErr:
			return err, true
		case <-p.quit:
			return ErrClosed, false
		}
		for {
			// Let the connections that are already runnable add their
			// commands before this write: one yield, no timer, so an idle
			// proxy adds no delay, and under load batches grow.
			runtime.Gosched()
			p.mu.Lock()
			batch := p.queue
			p.queue = spare[:0]
			p.mu.Unlock()
			if len(batch) == 0 {
				spare = batch
				break
			}
			now := Now()
			buf = buf[:0]
			n := 0
			for _, op := range batch {
				if op.Deadline != 0 && op.Deadline < now {
					if op.C != nil {
						op.C.Complete(p.opt.Index, Reply{}, &MasterError{p.opt.Addr, ErrExpired})
					}
					continue
				}
				buf = append(buf, op.Cmd...)
				op.written = now
				batch[n] = op
				n++
			}
			if n > 0 {
				// Registered before the write, so the reader always finds
				// the op its reply belongs to.
				p.inflight.push(batch[:n])
				if p.opt.OnBatch != nil {
					p.opt.OnBatch(p.opt.Index, n)
				}
				conn.SetWriteDeadline(time.Now().Add(p.opt.StallTimeout))
				if _, err := conn.Write(buf); err != nil {
					clear(batch)
					return err, false
				}
			}
			clear(batch)
			spare = batch[:0]
			if cap(buf) > 1<<20 {
				buf = nil // don't keep a huge buffer after a burst
			}
		}
	}
}

func (p *Pipeline) readLoop(conn net.Conn) error {
	buf := make([]byte, 64<<10)
	start, end := 0, 0
	var done []Op
	var replies []Reply
	lastRead := time.Now()
	for {
		conn.SetReadDeadline(time.Now().Add(p.opt.StallTimeout / 4))
		n, err := conn.Read(buf[end:])
		if n > 0 {
			end += n
			lastRead = time.Now()
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if p.inflight.len() > 0 && time.Since(lastRead) >= p.opt.StallTimeout {
					return ErrStalled
				}
				if p.inflight.len() == 0 {
					lastRead = time.Now()
				}
				continue
			}
			return err
		}
		replies = replies[:0]
		for start < end {
			r, m, perr := parseReply(buf[start:end], 0)
			if perr == errIncomplete {
				break
			}
			if perr != nil {
				return perr
			}
			replies = append(replies, r)
			start += m
		}
		if len(replies) > 0 {
			var ok bool
			done, ok = p.inflight.pop(done[:0], len(replies))
			if !ok {
				return errors.New("protocol out of sync: more replies than commands written")
			}
			reload := false
			now := Now()
			for i, op := range done {
				r := replies[i]
				if p.opt.OnReply != nil {
					p.opt.OnReply(p.opt.Index, time.Duration(now-op.written))
				}
				if r.Type == Error && bytes.HasPrefix(r.Str, []byte("NOSCRIPT")) {
					reload = true
				}
				if op.C != nil {
					op.C.Complete(p.opt.Index, r, nil)
				}
			}
			clear(done)
			if reload {
				p.reloadInit()
			}
		}
		if start == end {
			start, end = 0, 0
		} else if end == len(buf) {
			// Make room: move the partial reply to the front, or grow.
			if start > 0 {
				end = copy(buf, buf[start:end])
				start = 0
			} else {
				if len(buf) >= 512<<20 {
					return errors.New("reply larger than 512 MiB")
				}
				nb := make([]byte, len(buf)*2)
				copy(nb, buf[:end])
				buf = nb
			}
		}
	}
}

// reloadInit queues the Init commands again after a master said NOSCRIPT:
// someone flushed its scripts. The command that got NOSCRIPT has already
// counted as a no vote; it is not resent, because resending it now would put
// it behind commands written after it.
func (p *Pipeline) reloadInit() {
	p.opt.Logger.Warn("master answered NOSCRIPT: its scripts were flushed; loading them again",
		"master", p.opt.Addr)
	for _, c := range p.opt.Init {
		if bytes.Contains(c, []byte("AUTH")) {
			continue
		}
		_ = p.Submit(Op{Cmd: c})
	}
}

// fifo is the queue of written commands awaiting replies.
type fifo struct {
	mu   sync.Mutex
	ops  []Op
	head int
}

func (f *fifo) push(ops []Op) {
	f.mu.Lock()
	if f.head > 0 && f.head >= len(f.ops)/2 {
		n := copy(f.ops, f.ops[f.head:])
		clear(f.ops[n:])
		f.ops = f.ops[:n]
		f.head = 0
	}
	f.ops = append(f.ops, ops...)
	f.mu.Unlock()
}

// pop moves the n oldest ops into dst; ok is false if fewer are in flight.
func (f *fifo) pop(dst []Op, n int) ([]Op, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ops)-f.head < n {
		return dst, false
	}
	dst = append(dst, f.ops[f.head:f.head+n]...)
	clear(f.ops[f.head : f.head+n])
	f.head += n
	if f.head == len(f.ops) {
		f.ops = f.ops[:0]
		f.head = 0
	}
	return dst, true
}

func (f *fifo) drain() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := append([]Op(nil), f.ops[f.head:]...)
	clear(f.ops)
	f.ops = f.ops[:0]
	f.head = 0
	return ops
}

func (f *fifo) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ops) - f.head
}
