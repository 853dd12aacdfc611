package proxy

import (
	"math"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// pauseAt bounds what a client may send ahead while its pipeline waits for
// the masters or for it to read its replies: past it, lockproxy stops
// reading that socket (TCP then pushes back on the client) until the
// pipeline is answered. 64 KiB holds over a thousand pipelined lock
// commands; a single longer command still gets in once the client is idle.
const pauseAt = 64 << 10

// outputPauseAt bounds the replies one connection has rendered and not yet
// written: a pipeline stops parsing once its replies reach it, and the rest
// of its commands, in their order, run as the next piece once those replies
// are written (advance): a client that does not read holds at most this
// much, and one that does is answered in pieces of about this size, none of
// which keeps the loop from other clients for long. Input alone bounds
// nothing here: 64 KiB of "CLIENT GETNAME" asks for 4,000 copies of a
// client name of up to 1 MiB. Redis queues such replies without a bound
// (client-output-buffer-limit normal 0 0 0); 1 MiB is far above what a
// pipeline of lock commands returns (a thousand of them, 10-50 KiB).
const outputPauseAt = 1 << 20

// valueReplyCharge is what a command whose reply carries a stored value
// (GET, a read script) counts against outputPauseAt before its reply is
// known: such a reply may be as long as the value (up to
// proto_max_bulk_len), and the engine holds every master's copy until the
// request is decided. So at most 16 of them are in flight per connection
// at a time, whatever their size: a pipeline of 16 GETs, as
// redis-benchmark -P 16 sends, still goes out as one round.
const valueReplyCharge = 64 << 10

// turnQuantum bounds the event loop's time that one connection's pipeline
// takes in one turn: past it, the rest of the pipeline goes on at a later
// turn (goOnLater), after every other connection's ready events, so that
// one connection cannot keep the loop from the others. 100µs is a pipeline
// of about a hundred lock commands, or two INFOs. The clock is read after
// each command answered by lockproxy itself (INFO, CONFIG GET, CLIENT…, whose cost
// varies most), after each command over quantumBigCommand bytes, and every
// quantumCheckEvery commands: a pipeline of up to 64 lock commands
// (redis-benchmark -P 16) reads no more clocks than before and is never
// split.
const turnQuantum = int64(100 * time.Microsecond)

// turnShared bounds the loop's time per turn for the connections that go
// on with a pipeline cut at turnQuantum (front.runTurns): each gets one
// quantum per turn, in their order, until this is spent; the others wait
// for the next turn. So new events (another client's command, a master's
// reply) wait for at most this much of such work per turn, however many
// connections have long pipelines.
const turnShared = int64(time.Millisecond)

const (
	quantumCheckEvery = 64
	quantumBigCommand = 16 << 10
)

// unsentLimit bounds what the kernel holds of a client's replies that it
// has not sent (evloop.LimitUnsent, TCP_NOTSENT_LOWAT): without it, a
// client that does not read had Linux queue 4 MiB of replies per
// connection before lockproxy's writes stopped, each of them rendered on
// the event loop for nothing (1,000 such connections sending INFO: about
// 2,000 INFOs each). With it, a connection that does not read holds about
// this, what its own receive buffer took, and one piece of lockproxy's
// output (at most outputPauseAt). A client that reads is not slowed: bytes
// in flight are not counted, only those not sent yet.
const unsentLimit = 128 << 10

// clientConn is one client connection, whatever its transport
// (transport.go): the one client pipeline. Every complete command read is
// parsed and submitted before any is waited for, replies are written in
// order with one write, and the next pipeline starts once they are out. The
// Waiter's notification kicks it (Run) when the last request is decided.
// All of it runs on the event loop.
type clientConn struct {
	evloop.Kicked
	f    *front
	c    *client
	t    transport
	g    resp.Guard
	args [][]byte

	out          []byte // replies not yet written
	outOff       int
	kept         int64 // what account last charged to the input budget
	blockedSince int64 // evloop.Now() when the transport could take no more; 0: not

	// Large pub/sub payloads written from the hub's shared slice
	// (splice.go): their places in out, in order, how much of the first
	// is written, and their unwritten bytes; those a stream transport's
	// writer holds; the segments of the last write.
	splices     []splice
	spliceOff   int
	splicedSize int64
	lent        [][]byte
	segs        [][]byte

	// For the timeouts (idle.go): evloop.Now() at the accept, and when a
	// sweep last saw the connection active (a byte read or written since
	// the sweep before: no clock read per request).
	since, last int64
	active      bool

	busy       bool  // the pipeline waits for quorum decisions
	entered    bool  // the running pipeline counts in Server.active
	eof        bool  // the client sent its last byte
	closeAfter bool  // close once the replies are out (QUIT, shutdown, protocol error)
	inlineErr  error // a malformed inline command ended the pipeline (a *resp.ProtocolError)
	// rest is what was left of a pipeline when a command waited for a
	// script to be understood (awaitScript until then): it runs first.
	rest        []byte
	awaitScript bool
	closed      bool
	// more: the pipeline stopped at outputPauseAt or turnQuantum; the rest
	// runs at a later turn of the loop (front.runTurns), once its replies
	// are written (queued: it waits there). cut: the running pipeline
	// stopped so.
	more   bool
	queued bool
	cut    bool
	// turnStart is evloop.Now() when the connection's turn began (its
	// first command in this turn), for turnQuantum; 0: not read yet.
	turnStart int64

	// Pub/sub (pushes.go): what the hub delivered, not yet taken by the
	// loop (push) and taken but not yet framed (pushed); since when the
	// unwritten output is over the soft limit.
	push       pushQueue
	pushed     []pubsub.Message
	pushedSize int64 // their framed size, about
	reserved   int   // of pushed, those a renderPushes slot frames (pushesFirst)
	softSince  int64
	blk        *blocker // a BLPOP this connection is blocked in
}

func newClientConn(f *front, t transport, addr string) *clientConn {
	now := evloop.Now()
	lc := &clientConn{f: f, t: t, since: now, last: now}
	lc.c = f.s.newClient(addr, quorum.NewWaiterFunc(func() { f.loop.Kick(lc) }))
	lc.c.conn = lc
	lc.g.Limits = guardLimits(f.s.cfg)
	lc.g.Authed = &lc.c.authed
	lc.g.Budget = f.s.budget
	lc.g.Interrupt = func() { f.loop.Post(lc.evict) }
	lc.c.resume = func() { f.loop.Post(lc.resumeScript) }
	return lc
}

// OnEvent reads commands and writes replies as the transport allows.
func (lc *clientConn) OnEvent(ev uint32) {
	defer lc.recoverPanic()
	if lc.closed {
		return
	}
	if ev&(evloop.Error|evloop.Hangup) != 0 {
		lc.close() // reset or gone both ways: nobody to answer
		return
	}
	if ev&evloop.Writable != 0 {
		lc.flush()
		if lc.outOff == len(lc.out) && lc.pushesWaiting() {
			lc.drainPushes()
		}
		lc.goOnLater()
	}
	if ev&evloop.Readable != 0 && !lc.closed && !lc.eof && !lc.read() {
		return
	}
	lc.advance()
	lc.setEvents()
}

// read takes what the transport has into the guard; false when the
// connection closed.
func (lc *clientConn) read() bool {
	for {
		n, err := lc.g.Fill(lc.t.reader())
		switch {
		case err == syscall.EAGAIN, err == resp.ErrStopped:
			return true
		case err != nil:
			lc.close()
			return false
		case n == 0:
			if lc.blk != nil {
				// Blocked until a push or its timeout: nobody waits for
				// the answer any more (Redis frees such a client too).
				lc.close()
				return false
			}
			lc.eof = true // answer what it sent, then close
			return true
		}
		lc.active = true
		if _, fd := lc.t.(*fdTransport); fd {
			return true // one read per readiness; epoll tells of the rest
		}
	}
}

// Run goes on once the pipeline's requests are decided (evloop.Task: the
// Waiter kicked it; the engine enforces their deadlines).
func (lc *clientConn) Run() {
	defer lc.recoverPanic()
	if !lc.busy || lc.c.w.Pending() > 0 {
		return
	}
	lc.busy = false
	delete(lc.f.waiting, lc)
	if lc.closed {
		lc.drop()
		return
	}
	lc.finish()
	lc.flush()
	lc.pieceOut()
	lc.advance()
	lc.setEvents()
}

// advance starts pipelines while the connection is free: nothing waiting
// for masters, every reply written.
func (lc *clientConn) advance() {
	lc.turnStart = 0
	for !lc.closed && !lc.busy && lc.outOff == len(lc.out) && !lc.more {
		if lc.closeAfter {
			if lc.pushesWaiting() {
				return // held messages first (Writable drains them)
			}
			lc.close()
			return
		}
		if lc.awaitScript {
			return // resumeScript goes on
		}
		data, owned := lc.rest, lc.rest != nil
		lc.rest = nil
		if data == nil {
			data = lc.g.Take()
		}
		if len(data) == 0 {
			if err := lc.g.Broken(); err != nil {
				lc.protocolError(err)
				lc.flush()
				continue
			}
			if lc.eof {
				lc.close()
			}
			return
		}
		if len(lc.pushed) > 0 {
			// Messages taken before the command come before its reply.
			lc.framePushes()
		}
		lc.cut = lc.pipeline(data, owned)
		if !lc.busy {
			lc.flush()
			lc.pieceOut()
		}
	}
}

// pieceOut, once a pipeline cut at outputPauseAt or turnQuantum has its
// replies flushed, makes the rest wait for a later turn, and for them to
// be written.
func (lc *clientConn) pieceOut() {
	if !lc.cut {
		return
	}
	lc.cut = false
	lc.more = true
	lc.goOnLater()
}

// goOnLater queues the rest of a cut pipeline for the loop's next turn
// once its replies are written; until then a Writable event is sure to
// come (a socket's: setEvents asks for it; a stream's writer's, once done
// with them), which calls it again.
func (lc *clientConn) goOnLater() {
	if lc.more && !lc.queued && !lc.closed && lc.outOff == len(lc.out) && !lc.t.inFlight() {
		lc.queued = true
		lc.f.runnable = append(lc.f.runnable, lc)
		lc.f.armTurns()
	}
}

// goOn runs the rest of a cut pipeline, at its turn (front.runTurns).
func (lc *clientConn) goOn() {
	defer lc.recoverPanic()
	lc.queued = false
	if lc.closed {
		return
	}
	if lc.outOff < len(lc.out) || lc.t.inFlight() {
		// Pub/sub messages went out meanwhile and are not all written:
		// the Writable event that says they are queues it again.
		lc.setEvents()
		return
	}
	lc.more = false
	lc.advance()
	lc.setEvents()
}

// turnOver reports whether the connection has had its turnQuantum of the
// loop in this turn; the first call of a turn that did not read the
// clock yet starts it.
func (lc *clientConn) turnOver() bool {
	now := evloop.Now()
	if lc.turnStart == 0 {
		lc.turnStart = now
		return false
	}
	return now-lc.turnStart >= turnQuantum
}

// pipeline parses and submits the commands in data, up to outputPauseAt
// of replies (cut: the rest is in lc.rest). owned: data is lc.rest's, not
// the guard's buffer, which the next read overwrites.
func (lc *clientConn) pipeline(data []byte, owned bool) (cut bool) {
	s, c := lc.f.s, lc.c
	keep := func(b []byte) []byte {
		if owned {
			return b
		}
		return append([]byte(nil), b...)
	}
	if !s.enter() {
		// Shutting down: nothing more reaches a master. One error per
		// command, so that a pipelining client sees every reply.
		for len(data) > 0 {
			var err error
			if lc.args, data, err = resp.NextCommand(data, lc.args); err != nil {
				break
			}
			if len(lc.args) > 0 {
				lc.out = resp.AppendError(lc.out, "ERR lockproxy is shutting down")
			}
		}
		lc.closeAfter = true
		return false
	}
	lc.entered = true
	c.slots = c.slots[:0]
	c.localBuf = c.localBuf[:0]
	c.charge = 0
	c.endAllAwaits() // the last pipeline's, all ended: it was decided
	if lc.turnStart == 0 && len(data) > 64 {
		lc.turnStart = evloop.Now() // more than a command or two
	}
	n := 0
	for len(data) > 0 && !c.quit {
		var err error
		start := data
		if lc.args, data, err = resp.NextCommand(data, lc.args); err != nil {
			lc.inlineErr = err
			break
		}
		local := len(c.localBuf)
		if len(lc.args) > 0 {
			s.command(c, lc.args)
		}
		if c.barrier {
			// A BLPOP after other commands: it runs once their replies
			// are out, first in the next pipeline.
			c.barrier = false
			lc.rest = keep(start)
			break
		}
		if c.blocking {
			// A BLPOP blocks: the rest of the pipeline runs once it is
			// answered, as on Redis.
			c.blocking = false
			if len(data) > 0 {
				lc.rest = keep(data)
			}
			break
		}
		if c.deferred {
			// A script is being understood: this command and the rest of
			// the pipeline run once it is, in their order; the replies of
			// the commands before it go out meanwhile.
			c.deferred = false
			lc.rest = keep(start)
			lc.awaitScript = true
			break
		}
		if len(data) == 0 {
			break
		}
		n++
		yield := len(c.localBuf) != local || n%quantumCheckEvery == 0 || len(start)-len(data) > quantumBigCommand
		if yield = yield && lc.turnOver(); yield {
			s.yields.Add(1)
		}
		if yield || len(c.localBuf)+c.charge >= outputPauseAt {
			// The rest runs at a later turn, once these replies are
			// written; until then it is input read ahead (in the guard:
			// budgeted, and reading pauses at pauseAt).
			if owned {
				lc.rest = data
			} else {
				lc.g.Untake(len(data))
			}
			cut = true
			break
		}
	}
	clear(lc.args)
	if c.w.Pending() > 0 {
		lc.busy = true
		lc.f.waiting[lc] = struct{}{}
		return cut
	}
	lc.finish()
	return cut
}

// resumeScript goes on with a pipeline that waited for a script to be
// understood (evloop.Post, from the analysis).
func (lc *clientConn) resumeScript() {
	defer lc.recoverPanic()
	lc.awaitScript = false
	lc.c.analysis = nil
	if lc.closed {
		lc.rest = nil
		return
	}
	lc.advance()
	lc.setEvents()
}

// finish renders the pipeline's replies, in order, into lc.out.
func (lc *clientConn) finish() {
	s, c := lc.f.s, lc.c
	for i := range c.slots {
		if sl := &c.slots[i]; sl.kind == renderPushes {
			lc.reserved -= sl.off
			lc.framePushesUpTo(sl.off, math.MaxInt, sl.resp3)
			continue
		}
		lc.out = s.render(lc.out, c, &c.slots[i])
	}
	c.releaseSlots()
	if cap(c.localBuf) > keepBufMax {
		c.localBuf = nil // don't keep a burst's buffer
	}
	if len(lc.pushed) > 0 {
		lc.framePushes() // delivered while the pipeline ran
	}
	if lc.inlineErr != nil {
		lc.protocolError(lc.inlineErr)
	}
	lc.entered = false
	if s.leave() || c.quit {
		lc.closeAfter = true
	}
}

// drop forgets the pipeline of a connection that closed while it waited.
func (lc *clientConn) drop() {
	for i := range lc.c.slots {
		if lc.c.slots[i].ev != nil {
			lc.f.s.emit(&lc.c.slots[i]) // decided, though nobody reads it
		}
		for j := range lc.c.slots[i].parts {
			lc.f.s.emit(&lc.c.slots[i].parts[j])
		}
		lc.c.slots[i] = slot{}
	}
	lc.c.slots = lc.c.slots[:0]
	lc.reserved = 0
	if lc.entered {
		lc.entered = false
		lc.f.s.leave()
	}
}

// flush writes what it can of lc.out, and of the payloads spliced in it;
// the rest waits for Writable.
func (lc *clientConn) flush() {
	lc.returnLent()
	if lc.closed || lc.outOff == len(lc.out) {
		return
	}
	var n int
	var err error
	if len(lc.splices) == 0 {
		lc.segs = append(lc.segs[:0], lc.out[lc.outOff:])
		n, err = lc.t.write(lc.segs)
		lc.outOff += n
	} else {
		n, err = lc.t.write(lc.segments())
		lc.wrote(n, lc.t.inFlight())
	}
	clear(lc.segs) // no payload held past its write
	if err != nil && err != syscall.EAGAIN {
		lc.close() // the client is gone
		return
	}
	if n > 0 {
		lc.active = true
	}
	if lc.outOff < len(lc.out) {
		// The write timeout counts from the last write that made no
		// progress at all: a client that reads slowly but steadily is
		// never cut off, whatever the size of its replies.
		switch {
		case lc.blockedSince == 0:
			lc.blockedSince = evloop.Now()
			lc.f.stuck[lc] = struct{}{}
			lc.f.alarm.At(lc.writeLimit())
		case n > 0:
			lc.blockedSince = evloop.Now() // Fire finds the later limit
		}
		return
	}
	if lc.blockedSince != 0 {
		lc.blockedSince = 0
		delete(lc.f.stuck, lc)
	}
	if cap(lc.out) > keepBufMax {
		lc.out = nil // don't keep a burst's buffer
	}
	lc.out, lc.outOff = lc.out[:0], 0
}

// writeLimit is when a client that stopped reading is disconnected: the
// write timeout after the first write that its replies did not all fit
// since the last that took some.
func (lc *clientConn) writeLimit() int64 {
	limit := lc.blockedSince + int64(lc.f.s.cfg.WriteTimeout)
	if lc.f.closing {
		limit = min(limit, lc.f.writeBy)
	}
	return limit
}

// setEvents registers for what the connection can use: reading unless the
// client is done, broke the protocol, or sent too much ahead; writing while
// replies wait for room.
func (lc *clientConn) setEvents() {
	lc.account() // every handler ends here
	if lc.closed {
		return
	}
	var want uint32
	ahead := lc.busy || lc.outOff < len(lc.out) || lc.awaitScript || lc.rest != nil || lc.more
	if !lc.eof && !lc.g.Stopped() && !(ahead && lc.g.Unread() >= pauseAt) {
		want |= evloop.Readable
	}
	if lc.outOff < len(lc.out) || lc.pushesWaiting() {
		want |= evloop.Writable
	}
	if err := lc.t.want(want); err != nil {
		lc.close()
	}
}

// close closes the socket at once. A pipeline still waiting for the
// masters keeps counting in Server.active until it is decided (Run).
func (lc *clientConn) close() { lc.closeWith(nil) }

// closeWith closes the connection, writing last first if it can be at
// once (a final error).
func (lc *clientConn) closeWith(last []byte) {
	if lc.closed {
		return
	}
	lc.closed = true
	lc.t.close(last)
	lc.dropPushed() // unsubscribed or not, its taken messages are gone
	lc.dropSplices()
	lc.leaveHub()
	// Its requests still waiting behind their keys are not sent (reads,
	// acquisitions): nobody reads their replies.
	lc.c.w.Abandon()
	if lc.c.analysis != nil {
		// Nobody waits for the verdict here any more: an analysis nobody
		// else waits for is not run, or stopped (review, helper-59: 66
		// clients that sent a heavy script and hung up kept the analyzer
		// busy for everyone).
		lc.f.s.understood.Leave(lc.c.analysis)
		lc.c.analysis = nil
	}
	if lc.blk != nil {
		if lc.blk.w != nil {
			lc.blk.w.Abandon() // a pop round not sent pops nothing
		}
		lc.blk.finish(nil) // nobody to answer; the pipeline ends (Run)
	}
	delete(lc.f.conns, lc)
	delete(lc.f.stuck, lc)
	lc.f.s.budget.Release(&lc.g)
	lc.g.Free()
	lc.f.s.gone()
	lc.out, lc.outOff = nil, 0
	if lc.entered && !lc.busy {
		lc.drop()
	}
	lc.f.checkDrained()
}
