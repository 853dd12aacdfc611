// Package floor is a measuring stick, not a lock service: the least work a
// proxy does to fan a SET NX out to N masters and answer by majority, on
// lockproxy's own event loop. It exists so that `lockbench` can say how much
// of lockproxy's CPU per request is the fan-out itself (reading a client's
// command, writing it to every master, reading every master's reply,
// counting votes, answering in order) and how much is lockproxy's safety
// work on top of it.
//
// It keeps none of lockproxy's guarantees on purpose: no validity, no undo
// of a lost vote, no key queue, no deadline (a master that stops answering
// stops the floor's clients; one whose connection fails votes no from then
// on), no limits on input, no TLS, no AUTH, no
// metrics, no locks (everything runs on the loop's one thread). It forwards
// each command's bytes unchanged and knows SET, PING and little else.
// Anything that is not a measurement must not use it.
package floor

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Server is a running floor proxy.
type Server struct {
	loop    *evloop.Loop
	ln      net.Listener
	masters []*master
	q       int
	free    []*req               // recycled requests; loop only
	clients map[*client]struct{} // open client connections; loop only
	closing bool                 // Close has closed the connections; loop only
	log     *slog.Logger
}

// req is one client command and its votes.
type req struct {
	c        *client
	yes, no  int
	answered int
	reply    []byte // set when decided
	sent     bool   // the reply went into the client's buffer
}

var (
	replyOK   = []byte("+OK\r\n")
	replyNil  = []byte("$-1\r\n")
	replyPong = []byte("+PONG\r\n")
	replyErr  = []byte("-ERR the floor proxy serves SET and PING only (a measuring stick, not lockproxy)\r\n")
)

// Start listens on listen and connects to masters; the proxy runs until
// Close.
func Start(listen string, masters []string, log *slog.Logger) (*Server, error) {
	if len(masters) == 0 {
		return nil, errors.New("floor: no masters")
	}
	if log == nil {
		log = slog.Default()
	}
	loop, err := evloop.New(log)
	if err != nil {
		return nil, err
	}
	s := &Server{loop: loop, q: len(masters)/2 + 1, clients: map[*client]struct{}{}, log: log}
	for i, addr := range masters {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("floor: master %s: %w", addr, err)
		}
		fd, err := evloop.Detach(conn.(*net.TCPConn))
		if err != nil {
			conn.Close()
			s.Close()
			return nil, fmt.Errorf("floor: master %s: %w", addr, err)
		}
		m := &master{s: s, fd: fd, addr: addr, index: i, in: inbuf{b: make([]byte, 64<<10)}}
		if err := s.onLoop(func() error { return loop.Add(fd, m, evloop.Readable) }); err != nil {
			syscall.Close(fd)
			s.Close()
			return nil, err
		}
		s.masters = append(s.masters, m)
	}
	if s.ln, err = net.Listen("tcp", listen); err != nil {
		s.Close()
		return nil, err
	}
	go s.accept()
	return s, nil
}

// Addr is the address clients connect to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops listening, closes every connection and stops the loop.
func (s *Server) Close() {
	if s.ln != nil {
		s.ln.Close()
	}
	s.onLoop(func() error {
		s.closing = true
		for c := range s.clients {
			c.close()
		}
		for _, m := range s.masters {
			m.shut()
		}
		return nil
	})
	s.loop.Close()
}

func (s *Server) onLoop(f func() error) error {
	done := make(chan error, 1)
	if err := s.loop.Post(func() { done <- f() }); err != nil {
		return err
	}
	return <-done
}

func (s *Server) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		tc := conn.(*net.TCPConn)
		tc.SetNoDelay(true)
		fd, err := evloop.Detach(tc)
		if err != nil {
			s.log.Warn("floor: accept", "err", err)
			continue
		}
		c := &client{s: s, fd: fd, in: inbuf{b: make([]byte, 16<<10)}}
		if err := s.loop.Post(func() {
			if s.closing {
				syscall.Close(fd) // accepted as Close ran: nothing would close it
				return
			}
			if err := s.loop.Add(fd, c, evloop.Readable); err != nil {
				syscall.Close(fd)
				return
			}
			s.clients[c] = struct{}{}
		}); err != nil {
			syscall.Close(fd)
			return
		}
	}
}

func (s *Server) newReq(c *client) *req {
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		r.c = c
		return r
	}
	return &req{c: c}
}

// recycle returns r once its client has its reply and every master has
// answered.
func (s *Server) recycle(r *req) {
	if !r.sent || r.answered < len(s.masters) {
		return
	}
	*r = req{}
	s.free = append(s.free, r)
}

// client is one client connection.
type client struct {
	evloop.Kicked
	s       *Server
	fd      int
	in      inbuf
	out     []byte
	pending []*req // in command order; pending[head:] await their turn
	head    int
	args    [][]byte
	blocked bool // c.out waits for the socket to drain
	closed  bool
}

// OnEvent reads what the client sent and fans each complete command out.
func (c *client) OnEvent(ev uint32) {
	if c.closed {
		return
	}
	if ev&evloop.Writable != 0 && c.blocked {
		c.write()
		if c.closed {
			return
		}
	}
	if ev&(evloop.Readable|evloop.Hangup|evloop.Error) == 0 {
		return
	}
	n, err := c.in.read(c.fd)
	if err == syscall.EAGAIN {
		return
	}
	if err != nil || n == 0 {
		c.close()
		return
	}
	for b := c.in.unread(); len(b) > 0; b = c.in.unread() {
		m := frame(b)
		if m < 0 {
			c.close() // not RESP: the floor does not serve inline commands
			return
		}
		if m == 0 {
			break
		}
		c.command(b[:m])
		c.in.consumed(m)
	}
	c.flush()
}

// command starts one complete command.
func (c *client) command(cmd []byte) {
	c.args, _, _ = resp.NextCommand(cmd, c.args)
	r := c.s.newReq(c)
	c.pending = append(c.pending, r)
	switch {
	case len(c.args) >= 3 && bytes.EqualFold(c.args[0], []byte("SET")):
		for _, m := range c.s.masters {
			m.submit(cmd, r)
		}
	case len(c.args) >= 1 && bytes.EqualFold(c.args[0], []byte("PING")):
		r.reply, r.answered = replyPong, len(c.s.masters)
	default:
		r.reply, r.answered = replyErr, len(c.s.masters)
	}
}

// Run answers what is decided, in order (Task: a vote decided one).
func (c *client) Run() { c.flush() }

func (c *client) flush() {
	if c.closed {
		return
	}
	for c.head < len(c.pending) && c.pending[c.head].reply != nil {
		r := c.pending[c.head]
		c.out = append(c.out, r.reply...)
		r.sent = true
		c.pending[c.head] = nil
		c.head++
		c.s.recycle(r)
	}
	if c.head == len(c.pending) {
		c.pending, c.head = c.pending[:0], 0
	} else if c.head > len(c.pending)/2 {
		// A deep pipeline whose head waits: drop the answered half so
		// that pending does not grow with every command.
		n := copy(c.pending, c.pending[c.head:])
		clear(c.pending[n:])
		c.pending, c.head = c.pending[:n], 0
	}
	if len(c.out) == 0 {
		return
	}
	if c.blocked {
		return // the Writable event goes on
	}
	c.write()
}

// write writes c.out; a full socket buffer waits for the Writable event.
func (c *client) write() {
	n, err := evloop.Write(c.fd, c.out)
	if err != nil && err != syscall.EAGAIN {
		c.close()
		return
	}
	c.out = c.out[:copy(c.out, c.out[n:])]
	if blocked := len(c.out) > 0; blocked != c.blocked {
		c.blocked = blocked
		ev := uint32(evloop.Readable)
		if blocked {
			ev |= evloop.Writable
		}
		if c.s.loop.Modify(c.fd, ev) != nil {
			c.close()
		}
	}
}

func (c *client) close() {
	if c.closed {
		return
	}
	c.closed = true
	delete(c.s.clients, c)
	c.s.loop.Remove(c.fd)
	syscall.Close(c.fd)
	// Requests still in flight keep c until their masters answer; their
	// replies go nowhere.
	for _, r := range c.pending[c.head:] {
		r.sent = true
		c.s.recycle(r)
	}
	c.pending = nil
}
