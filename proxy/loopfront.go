package proxy

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
)

// front is the part of the Server that serves plain TCP clients on the
// engine's event loop (loopclient.go has one connection). TLS clients are
// served by redcon, a goroutine each. Every field but the ones set at
// creation is the loop's.
type front struct {
	s     *Server
	loop  *evloop.Loop
	alarm *evloop.Alarm

	conns   map[*loopClient]struct{}
	waiting map[*loopClient]struct{} // pipelines with requests not yet decided
	stuck   map[*loopClient]struct{} // replies not all written: the socket is full
	closing bool
	writeBy int64         // once closing: evloop.Now() by which every write must end
	drained chan struct{} // closed once closing and every connection is closed
	isDrain bool
	sweepAt int64 // next look for timed-out connections (idle.go); 0: none planned
}

// loopFront returns the Server's front, starting it on first use.
func (s *Server) loopFront() (*front, error) {
	s.frontOnce.Do(func() {
		f := &front{
			s: s, loop: s.cfg.Engine.Loop(),
			conns: map[*loopClient]struct{}{}, waiting: map[*loopClient]struct{}{}, stuck: map[*loopClient]struct{}{},
			drained: make(chan struct{}),
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

// serveLoop accepts clients on ln and hands them to the event loop.
func (s *Server) serveLoop(ln *net.TCPListener) error {
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
	for {
		conn, err := ln.AcceptTCP()
		if err != nil {
			if s.isClosing() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			s.cfg.Logger.Warn("accept failed; retrying", "err", err)
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
func (f *front) admit(conn *net.TCPConn) {
	if msg := f.s.admit(); msg != "" {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write([]byte("-" + msg + "\r\n"))
		conn.Close()
		return
	}
	addr := conn.RemoteAddr().String()
	fd, err := evloop.Detach(conn)
	if err != nil {
		f.s.cfg.Logger.Warn("could not take an accepted client connection onto the event loop; it is closed", "client", addr, "err", err)
		conn.Close()
		f.s.gone()
		return
	}
	lc := newLoopClient(f, fd, addr)
	if f.loop.Post(func() { f.register(lc) }) != nil {
		syscall.Close(fd)
		f.s.gone()
	}
}

func (f *front) register(lc *loopClient) {
	if f.closing {
		lc.closed = true
		syscall.Close(lc.fd)
		f.s.gone()
		return
	}
	if err := f.loop.Add(lc.fd, lc, evloop.Readable); err != nil {
		f.s.cfg.Logger.Warn("could not register a client connection on the event loop; it is closed", "client", lc.c.addr, "err", err)
		lc.closed = true
		syscall.Close(lc.fd)
		f.s.gone()
		return
	}
	lc.events = evloop.Readable
	f.conns[lc] = struct{}{}
	f.armSweep(evloop.Now())
}

// Fire enforces the front's deadlines (evloop.Timer): clients that do not
// read their replies within Config.WriteTimeout (or, at shutdown, the
// grace) are closed, and so are those past their idle or handshake
// timeout. Requests' deadlines are the engine's.
func (f *front) Fire(now int64) int64 {
	next := f.sweep(now)
	for lc := range f.stuck {
		limit := lc.writeLimit()
		if now >= limit {
			f.s.cfg.Logger.Debug("client did not read its replies in time; its connection is closed", "client", lc.c.addr, "write_timeout", f.s.cfg.WriteTimeout)
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
	for lc := range f.conns {
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
