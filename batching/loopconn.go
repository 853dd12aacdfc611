package batching

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// loopConn is one master connection driven by the event loop (Options.Loop)
// instead of a writer and a reader goroutine. Submit kicks it; it runs on
// the loop after the iteration's events, so everything the loop read from
// every client in that iteration goes out in one write. Replies are read
// and handed to their ops on the loop too.
//
// The pipeline's own goroutine (serveLoop) only supervises: it notices a
// stall and Close, and redials when the connection ends.
type loopConn struct {
	evloop.Kicked
	p    *Pipeline
	loop *evloop.Loop
	fd   int

	// Loop only.
	closed bool
	spare  []Op
	out    []byte // encoded commands not yet written (socket buffer full)
	outOff int
	in     []byte
	start  int
	end    int
	sc     scratch
	held   bool // Run found a batch in flight: kick it again once answered

	lastRead     atomic.Int64 // Now() of the last read, for stall detection
	blockedSince atomic.Int64 // Now() when a write found the socket full; 0: not blocked
	done         chan error   // receives why the connection ended, once
}

// serveLoop hands conn to the loop and supervises it until it ends.
func (p *Pipeline) serveLoop(conn *net.TCPConn) error {
	fd, err := evloop.Detach(conn)
	if err != nil {
		return err
	}
	lc := &loopConn{p: p, loop: p.opt.Loop, fd: fd, done: make(chan error, 1), in: make([]byte, 64<<10)}
	lc.lastRead.Store(Now())
	attached := make(chan error, 1)
	if err := lc.loop.Post(func() { attached <- lc.loop.Add(fd, lc, evloop.Readable) }); err != nil {
		syscall.Close(fd)
		return err
	}
	if err := <-attached; err != nil {
		syscall.Close(fd)
		return err
	}
	p.mu.Lock()
	p.flusher = lc
	p.mu.Unlock()
	p.setState(true, nil)

	t := time.NewTicker(p.opt.StallTimeout / 4)
	defer t.Stop()
	for {
		select {
		case err := <-lc.done:
			return err
		case <-p.quit:
			lc.stop(ErrClosed)
			return <-lc.done
		case <-t.C:
			now := Now()
			if p.inflight.len() == 0 {
				lc.lastRead.Store(now)
			}
			stall := int64(p.opt.StallTimeout)
			if b := lc.blockedSince.Load(); (b != 0 && now-b >= stall) || now-lc.lastRead.Load() >= stall {
				lc.stop(ErrStalled)
			}
		}
	}
}

// stop ends the connection from another goroutine.
func (lc *loopConn) stop(err error) {
	if lc.loop.Post(func() { lc.fail(err) }) != nil {
		lc.fail(err) // the loop is gone: nothing else touches lc
	}
}

// Run writes what is queued (Task: Submit kicked it).
func (lc *loopConn) Run() {
	if lc.closed || lc.outOff < len(lc.out) {
		return // a write is pending: the rest waits in the queue (bounded)
	}
	if lc.p.inflight.len() > 0 {
		// One batch in flight per master: what arrives meanwhile waits for
		// its replies and goes out with them, so a batch holds what came
		// in during one round trip. Without a timer, this grows batches
		// with load, and fewer, larger writes cost the masters less CPU,
		// which they spend mostly being woken (figures:
		// docs/bench/README.md).
		lc.held = true
		return
	}
	spare, out, n, _ := lc.p.takeBatch(lc.spare, lc.out[:0])
	lc.spare, lc.out = spare, out
	if n == 0 {
		return
	}
	lc.outOff = 0
	lc.write()
}

// write writes lc.out[lc.outOff:]; a full socket buffer leaves the rest for
// the Writable event.
func (lc *loopConn) write() {
	n, err := evloop.Write(lc.fd, lc.out[lc.outOff:])
	if err != nil && err != syscall.EAGAIN {
		lc.fail(err)
		return
	}
	lc.outOff += n
	if lc.outOff < len(lc.out) {
		if lc.blockedSince.Load() == 0 {
			lc.blockedSince.Store(Now())
			if err := lc.loop.Modify(lc.fd, evloop.Readable|evloop.Writable); err != nil {
				lc.fail(err)
			}
		}
		return
	}
	if lc.blockedSince.Load() != 0 {
		lc.blockedSince.Store(0)
		if err := lc.loop.Modify(lc.fd, evloop.Readable); err != nil {
			lc.fail(err)
			return
		}
		lc.loop.Kick(lc) // what was queued meanwhile
	}
	if cap(lc.out) > 1<<20 {
		lc.out = nil // don't keep a huge buffer after a burst
	}
	lc.out, lc.outOff = lc.out[:0], 0
}

// OnEvent reads replies, or goes on with a pending write.
func (lc *loopConn) OnEvent(ev uint32) {
	if ev&evloop.Writable != 0 && lc.outOff < len(lc.out) {
		lc.write()
	}
	if lc.closed || ev&(evloop.Readable|evloop.Hangup|evloop.Error) == 0 {
		return
	}
	if lc.end == len(lc.in) {
		// Make room: move the partial reply to the front, or grow.
		if lc.start > 0 {
			lc.end = copy(lc.in, lc.in[lc.start:lc.end])
			lc.start = 0
		} else {
			if len(lc.in) >= 512<<20 {
				lc.fail(errors.New("reply larger than 512 MiB"))
				return
			}
			nb := make([]byte, len(lc.in)*2)
			copy(nb, lc.in[:lc.end])
			lc.in = nb
		}
	}
	n, err := evloop.Read(lc.fd, lc.in[lc.end:])
	switch {
	case err == syscall.EAGAIN:
		return
	case err != nil:
		lc.fail(err)
		return
	case n == 0:
		lc.fail(io.EOF)
		return
	}
	lc.end += n
	lc.lastRead.Store(Now())
	m, err := lc.p.consume(lc.in[lc.start:lc.end], &lc.sc)
	lc.start += m
	if lc.held && lc.p.inflight.len() == 0 {
		lc.held = false
		lc.loop.Kick(lc)
	}
	if err != nil {
		lc.fail(err)
		return
	}
	if lc.start == lc.end {
		lc.start, lc.end = 0, 0
	}
}

// fail closes the connection: every op written and not answered fails
// with err, and the supervisor redials. Loop only (or once the loop is
// gone).
func (lc *loopConn) fail(err error) {
	if lc.closed {
		return
	}
	lc.closed = true
	lc.loop.Remove(lc.fd)
	syscall.Close(lc.fd)
	p := lc.p
	p.mu.Lock()
	if p.flusher == lc {
		p.flusher = nil
	}
	p.broken, p.lastErr = true, err
	p.mu.Unlock()
	for _, op := range p.inflight.drain() {
		if op.C != nil {
			op.C.Complete(p.opt.Index, resp.Reply{}, &MasterError{p.opt.Addr, err})
		}
	}
	lc.done <- err
}
