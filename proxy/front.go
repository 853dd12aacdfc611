package proxy

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
)

// front is the part of the Server that serves its clients on the event
// loop (conn.go has one connection, transport.go its two transports).
// Every field but the ones set at creation is the loop's.
type front struct {
	s     *Server
	loop  *evloop.Loop
	alarm *evloop.Alarm

	conns   map[*clientConn]struct{}
	waiting map[*clientConn]struct{} // pipelines with requests not yet decided
	stuck   map[*clientConn]struct{} // replies not all written: the socket is full
	closing bool
	writeBy int64         // once closing: evloop.Now() by which every write must end
	drained chan struct{} // closed once closing and every connection is closed
	isDrain bool
	sweepAt int64 // next look for timed-out connections (idle.go); 0: none planned

	// runnable: connections whose pipeline was cut (turnQuantum,
	// outputPauseAt) and whose replies are written, in the order they
	// queued; runTurns goes on with them, in the loop's next turn.
	runnable    []*clientConn
	turnsArmed  bool
	writeLogAt  int64 // evloop.Now() of the last write-timeout warning
	writeUnlogd int   // write-timeout closes since, not logged one by one

	shared     sharedPushes                     // payloads subscribers have not read (sharedpush.go)
	blocked    map[string]map[*blocker]struct{} // BLPOP waiters by key (blocking.go)
	btimes     blockTimes                       // those with a timeout, by deadline (blocktimes.go)
	stopListen func()                           // ends the hub's events to onEvent
}

// loopFront returns the Server's front, starting it on first use.
func (s *Server) loopFront() (*front, error) {
	s.frontOnce.Do(func() {
		f := &front{
			s: s, loop: s.loop,
			conns: map[*clientConn]struct{}{}, waiting: map[*clientConn]struct{}{}, stuck: map[*clientConn]struct{}{},
			drained: make(chan struct{}),
			blocked: map[string]map[*blocker]struct{}{},
			shared:  sharedPushes{seen: &s.sharedBytes},
		}
		if s.cfg.Hub != nil {
			f.stopListen = s.cfg.Hub.Listen(f.onEvent)
		}
		ready := make(chan struct{})
		if s.frontErr = f.loop.Post(func() { f.alarm = f.loop.NewAlarm(f); close(ready) }); s.frontErr != nil {
			return
		}
		<-ready
		s.mu.Lock()
		s.front = f
		s.mu.Unlock()
	})
	return s.front, s.frontErr
}

// serveOn accepts clients on ln until Shutdown and hands them to the event
// loop: a plain TCP socket the loop polls itself, any other connection
// (TLS) through a stream transport.
func (s *Server) serveOn(ln net.Listener) error {
	f, err := s.loopFront()
	if err != nil {
		ln.Close()
		return err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var loggedAt time.Time // the last accept failure logged, and how many since
	unlogged := 0
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors (EMFILE) this fails every 5ms: a warning
			// at most every 10s, with how many more failed since.
			if now := time.Now(); now.Sub(loggedAt) >= 10*time.Second {
				s.cfg.Logger.Warn("accept failed; retrying every 5ms (on \"too many open files\" the process's descriptor limit, ulimit -n, is too low for its clients and masters)",
					"err", err, "failures_since_last_warning", unlogged)
				loggedAt, unlogged = now, 0
			} else {
				unlogged++
			}
			time.Sleep(5 * time.Millisecond) // back off on e.g. EMFILE
			continue
		}
		f.admit(conn)
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// admit counts conn in and passes it to the loop, or answers why not.
func (f *front) admit(conn net.Conn) {
	if msg := f.s.admit(); msg != "" {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write([]byte("-" + msg + "\r\n"))
		conn.Close()
		return
	}
	addr := conn.RemoteAddr().String()
	var t transport
	if tc, ok := conn.(*net.TCPConn); ok && evloop.Supported && !f.s.cfg.StreamClients {
		fd, err := evloop.Detach(tc)
		if err != nil {
			f.s.cfg.Logger.Warn("could not take an accepted client connection onto the event loop; it is closed", "client", addr, "err", err)
			conn.Close()
			f.s.gone()
			return
		}
		if err := evloop.LimitUnsent(fd, unsentLimit); err != nil {
			f.s.cfg.Logger.Debug("could not bound the kernel's unsent output of a client connection", "client", addr, "err", err)
		}
		t = newFDTransport(f.loop, fd)
	} else {
		limitUnsent(conn, f.s.cfg.Logger)
		t = newStreamTransport(f.loop, conn, f.writeDeadline)
	}
	lc := newClientConn(f, t, addr)
	if f.loop.Post(func() { f.register(lc) }) != nil {
		t.close(nil)
		f.s.gone()
	}
}

// limitUnsent sets unsentLimit on the TCP socket under conn (TLS too).
func limitUnsent(conn net.Conn, log *slog.Logger) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err == nil {
		rc.Control(func(fd uintptr) { err = evloop.LimitUnsent(int(fd), unsentLimit) })
	}
	if err != nil {
		log.Debug("could not bound the kernel's unsent output of a client connection", "client", conn.RemoteAddr().String(), "err", err)
	}
}

// register puts lc on the loop and starts reading it.
func (f *front) register(lc *clientConn) {
	if f.closing {
		lc.closed = true
		lc.t.close(nil)
		f.s.gone()
		return
	}
	switch t := lc.t.(type) {
	case *fdTransport:
		if err := f.loop.Add(t.fd, lc, evloop.Readable); err != nil {
			f.s.cfg.Logger.Warn("could not register a client connection on the event loop; it is closed", "client", lc.c.addr, "err", err)
			lc.closed = true
			t.close(nil)
			f.s.gone()
			return
		}
		t.events = evloop.Readable
	case *streamTransport:
		t.start(lc)
		t.want(evloop.Readable)
	}
	f.conns[lc] = struct{}{}
	f.armSweep(evloop.Now())
}

// armTurns makes runTurns run in the loop's next turn.
func (f *front) armTurns() {
	if !f.turnsArmed {
		f.turnsArmed = true
		f.loop.Later(f.runTurns)
	}
}

// runTurns goes on with the connections whose pipelines were cut, after
// the events of the turn: each gets one turnQuantum, in their order, until
// turnShared of the loop's time is spent; the others keep their place, ahead
// of those that queue meanwhile, for the next turn.
func (f *front) runTurns() {
	f.turnsArmed = false
	n := len(f.runnable)
	start := evloop.Now()
	i := 0
	for i < n {
		lc := f.runnable[i]
		f.runnable[i] = nil
		i++
		lc.goOn() // may queue it again, at the end
		if evloop.Now()-start >= turnShared {
			break
		}
	}
	m := copy(f.runnable, f.runnable[i:])
	clear(f.runnable[m:])
	f.runnable = f.runnable[:m]
	if m > 0 {
		f.armTurns()
	} else if cap(f.runnable) > 1024 {
		f.runnable = nil // don't keep a burst's queue
	}
}

// writeTimedOut counts and reports a client closed for not reading its
// replies: a warning, at most one every writeLogEvery with how many others
// were closed since.
func (f *front) writeTimedOut(lc *clientConn, now int64) {
	f.s.writeClosed.Add(1)
	if f.closing {
		return // the shutdown's grace, not the client's fault alone
	}
	if f.writeLogAt != 0 && now-f.writeLogAt < writeLogEvery {
		f.writeUnlogd++
		return
	}
	f.s.cfg.Logger.Warn("client did not read its replies for the write timeout; its connection is closed (only its own commands were held meanwhile). "+
		"A client must read the replies to the commands it sends: look for one stuck or pipelining without reading (INFO stats write_timeout_closes counts them)",
		"client", lc.c.addr, "name", clipName(lc.c.name), "write_timeout", f.s.cfg.WriteTimeout, "unwritten_bytes", lc.unwritten()+int64(lc.t.held()),
		"unread_input_bytes", lc.g.Unread(), "others_closed_since_last_warning", f.writeUnlogd)
	f.writeLogAt, f.writeUnlogd = now, 0
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// writeLogEvery spaces the write-timeout warnings: 1,000 clients that stop
// reading together make one line, and a count in the next.
const writeLogEvery = int64(10 * time.Second)

// writeDeadline bounds a stream transport's blocking write: the write
// timeout, or the shutdown's grace. Any goroutine.
func (f *front) writeDeadline() time.Time {
	d := time.Now().Add(f.s.cfg.WriteTimeout)
	if wb := f.s.writeBy.Load(); wb != 0 {
		d = time.Unix(0, wb)
	}
	return d
}

// Fire enforces the front's deadlines (evloop.Timer): clients that do not
// read their replies within Config.WriteTimeout (or, at shutdown, the
// grace) are closed, and so are those past their idle or handshake
// timeout. Requests' deadlines are the engine's.
func (f *front) Fire(now int64) int64 {
	next := min(f.sweep(now), f.expireBlocked(now))
	for lc := range f.stuck {
		limit := lc.writeLimit()
		if now >= limit && lc.t.inFlight() && !f.closing {
			// A stream's writer is writing a batch, each piece under a
			// write timeout of its own (writeAll): a client that takes
			// them steadily reads, though one batch (a large message)
			// takes longer than the timeout, and one that stops fails
			// the writer's deadline, which closes it (written). Counted
			// from the first write the writer could not take, a TLS
			// subscriber reading large messages steadily, each taking
			// longer than the timeout, was closed for not reading
			// (TestSteadySlowSubscriberKeptOnBothTransports).
			lc.blockedSince = now
			limit = lc.writeLimit()
		}
		if now >= limit {
			f.writeTimedOut(lc, now)
			lc.close()
			continue
		}
		next = min(next, limit)
	}
	return next
}

// shutdown closes the idle connections and marks the others to close once
// their running pipeline is answered.
func (f *front) shutdown(writeBy int64) {
	f.closing, f.writeBy = true, writeBy
	if f.stopListen != nil {
		f.stopListen()
	}
	f.unblockAll()
	for lc := range f.conns {
		if lc.pushesWaiting() {
			// Messages held for a subscriber that was not reading go
			// out within the grace, as those already framed do.
			lc.framePushes()
			lc.flush()
		}
		if !lc.busy && lc.outOff == len(lc.out) {
			lc.close()
			continue
		}
		lc.closeAfter = true
		if lc.blockedSince != 0 {
			f.alarm.At(lc.writeLimit())
		}
	}
	f.checkDrained()
}

func (f *front) checkDrained() {
	if f.closing && len(f.conns) == 0 && !f.isDrain {
		f.isDrain = true
		close(f.drained)
	}
}

// stopLoopClients is Shutdown's part for the front: it stops accepting,
// closes idle clients and waits until the others have been answered and
// closed (or the write grace has passed), or until done is closed.
func (s *Server) stopLoopClients(done <-chan struct{}) error {
	s.mu.Lock()
	f, lns := s.front, s.lns
	s.lns = nil
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	if f == nil {
		return nil
	}
	writeBy := evloop.Now() + int64(shutdownWriteGrace)
	if f.loop.Post(func() { f.shutdown(writeBy) }) != nil {
		return nil
	}
	select {
	case <-f.drained:
		return nil
	case <-done:
		return errors.New("client connections still open")
	}
}

// frontState is the Server's handle on its front.
type frontState struct {
	frontOnce sync.Once
	front     *front // s.mu
	frontErr  error
	lns       []net.Listener // s.mu
}
