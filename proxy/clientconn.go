package proxy

import (
	"errors"
	"net"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Client connections as redcon sees them: write deadlines, and reads
// through the RESP guard.

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
	cc := &clientConn{Conn: c, s: l.s, last: time.Now()}
	cc.rd = readerFunc(cc.readConn)
	cc.g.Limits = guardLimits(l.s.cfg)
	cc.g.Budget, cc.g.Mirror = l.s.budget, true
	cc.g.Interrupt = func() { cc.Conn.SetReadDeadline(time.Unix(1, 0)) } // the guard's read sees evicting
	l.s.mu.Lock()
	l.s.conns[cc] = struct{}{}
	if l.s.closing {
		cc.capWriteDeadline()
	}
	l.s.mu.Unlock()
	return cc, nil
}

// clientConn is a client connection as redcon sees it. Reads pass through
// a RESP guard (resp.Guard) that enforces the limits
// before redcon's reader, which has none, sees a byte; writes get a
// deadline, so a client that stops reading cannot block its handler
// forever.
type clientConn struct {
	net.Conn
	s   *Server
	set time.Time // when the write deadline was last moved; handler goroutine only
	g   resp.Guard

	// The idle and handshake timeouts (idle.go); handler goroutine only.
	c        *client    // set by Server.accept
	rd       readerFunc // readConn
	last     time.Time  // last byte read or reply written
	deadline time.Time  // the read deadline set
}

// readerFunc makes a function an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Write moves the deadline at most every timeout/4 (it costs a timer
// update): a write always has at least 3/4 of the timeout. Once the
// server shuts down, no write may end later than writeBy.
func (c *clientConn) Write(b []byte) (int, error) {
	now := time.Now()
	c.last = now
	if c.s.writeBy.Load() == 0 && now.Sub(c.set) > c.s.cfg.WriteTimeout/4 {
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
	c.s.budget.Release(&c.g)
	return c.Conn.Close()
}

// Read hands redcon only complete, well-formed commands within the limits.
// A protocol error is answered once the commands before it have been
// handed out (their replies are flushed by then: redcon reads only after
// flushing), then the connection ends: the stream cannot be trusted past
// it.
func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.g.Read(c.rd, p)
	var pe *resp.ProtocolError
	if errors.As(err, &pe) {
		if !pe.OverBudget {
			c.s.protoErr.Add(1)
		}
		c.s.cfg.Logger.Debug("client stream ended by lockproxy; closing its connection", "client", c.RemoteAddr().String(), "err", pe.Msg)
		c.Conn.SetWriteDeadline(time.Now().Add(min(c.s.cfg.WriteTimeout, time.Second)))
		c.Conn.Write([]byte("-" + pe.Reply() + "\r\n"))
	}
	return n, err
}
