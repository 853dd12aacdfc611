package batching

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// This file is the life of one connection: one writer and one reader
// until either fails (setup.go dials it and runs Init).

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
	p.markBroken(err)
	for _, op := range p.inflight.drain() {
		if op.C != nil {
			op.C.Complete(p.opt.Index, resp.Reply{}, &MasterError{p.opt.Addr, err})
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
			var more bool
			spare, buf, _, more = p.takeBatch(spare, buf[:0])
			if !more {
				break
			}
			if len(buf) > 0 {
				conn.SetWriteDeadline(time.Now().Add(p.opt.StallTimeout))
				if _, err := conn.Write(buf); err != nil {
					return err, false
				}
			}
			if cap(buf) > 1<<20 {
				buf = nil // don't keep a huge buffer after a burst
			}
		}
	}
}

// takeBatch takes every queued op: those whose deadline passed complete
// with ErrExpired, the others are registered as in flight (before they are
// written, so the reader always finds the op its reply belongs to) and
// appended to buf, to be written in one go. spare is the slice the queue
// continues in; the emptied batch is returned for the next call. more is
// false when nothing was queued.
func (p *Pipeline) takeBatch(spare []Op, buf []byte) (next []Op, out []byte, n int, more bool) {
	p.mu.Lock()
	batch := p.queue
	p.queue, p.qbytes = spare[:0], 0
	// Counted in Depth until they are in flight or completed: a shutdown's
	// Drain must not see an empty pipeline in between.
	taken := int64(len(batch))
	p.completing.Add(taken)
	p.mu.Unlock()
	defer p.completing.Add(-taken)
	if len(batch) == 0 {
		return batch, buf, 0, false
	}
	now := Now()
	for _, op := range batch {
		if op.Deadline != 0 && op.Deadline < now {
			if op.C != nil {
				op.C.Complete(p.opt.Index, resp.Reply{}, &MasterError{p.opt.Addr, ErrExpired})
			}
			continue
		}
		buf = append(buf, op.Cmd...)
		op.written = now
		batch[n] = op
		n++
	}
	if n > 0 {
		p.inflight.push(batch[:n])
		if p.opt.OnBatch != nil {
			p.opt.OnBatch(p.opt.Index, n)
		}
	}
	clear(batch)
	return batch[:0], buf, n, true
}

func (p *Pipeline) readLoop(conn net.Conn) error {
	buf := make([]byte, 64<<10)
	start, end := 0, 0
	var sc scratch
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
		m, perr := p.consume(buf[start:end], &sc)
		start += m
		if perr != nil {
			return perr
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

// scratch is the reusable memory of consume.
type scratch struct {
	replies []resp.Reply
	done    []Op
}

// consume parses the complete replies at the start of b, hands each to the
// op it answers (in the order the ops were written) and returns the bytes
// it used. An error means the connection cannot be trusted any more.
func (p *Pipeline) consume(b []byte, sc *scratch) (int, error) {
	used := 0
	sc.replies = sc.replies[:0]
	for used < len(b) {
		r, m, err := resp.Parse(b[used:])
		if err == resp.ErrIncomplete {
			break
		}
		if err != nil {
			return used, err
		}
		sc.replies = append(sc.replies, r)
		used += m
	}
	if len(sc.replies) == 0 {
		return used, nil
	}
	p.completing.Add(int64(len(sc.replies)))
	defer p.completing.Add(-int64(len(sc.replies)))
	done, ok := p.inflight.pop(sc.done[:0], len(sc.replies))
	sc.done = done
	if !ok {
		return used, errors.New("protocol out of sync: more replies than commands written")
	}
	reload := false
	if p.opt.OnReply != nil {
		// One round trip per read, of its oldest reply's command: a
		// histogram update per reply would cost more than the rest of
		// the reply's handling.
		p.opt.OnReply(p.opt.Index, time.Duration(Now()-done[0].written))
	}
	for i, op := range done {
		r := sc.replies[i]
		if r.Type == resp.Error && bytes.HasPrefix(r.Str, []byte("NOSCRIPT")) {
			reload = true
		}
		if op.C != nil {
			op.C.Complete(p.opt.Index, r, nil)
		}
	}
	clear(done)
	clear(sc.replies)
	if reload {
		p.reloadInit()
	}
	return used, nil
}

// reloadInit queues the Init commands again after a master said NOSCRIPT:
// someone flushed its scripts. AUTH is not among them: the connection is
// still authenticated. The command that got NOSCRIPT has already counted as
// a no vote; it is not resent, because resending it now would put it behind
// commands written after it.
func (p *Pipeline) reloadInit() {
	p.opt.Logger.Warn("master answered NOSCRIPT: its scripts were flushed; loading them again",
		"master", p.opt.Addr)
	for _, c := range p.opt.Init {
		_ = p.Submit(Op{Cmd: c})
	}
}

// fifo is the queue of written commands awaiting replies.
type fifo struct {
	mu   sync.Mutex
	ops  []Op
	head int
	// oldest is when the oldest op in flight was written (0: none), read
	// without the lock by Stalled.
	oldest atomic.Int64
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
	if f.oldest.Load() == 0 && len(f.ops) > f.head {
		f.oldest.Store(f.ops[f.head].written)
	}
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
		f.oldest.Store(0)
	} else {
		f.oldest.Store(f.ops[f.head].written)
	}
	return dst, true
}

func (f *fifo) drain() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.oldest.Store(0)
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
