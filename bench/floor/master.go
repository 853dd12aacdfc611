package floor

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// master is one master connection, with lockproxy's batching policy: one
// batch in flight, what arrives meanwhile goes out with its replies.
type master struct {
	evloop.Kicked
	s        *Server
	fd       int
	addr     string
	index    int
	queued   []byte // commands not yet written
	qreqs    []*req
	wbuf     []byte // the batch being written; wbuf[woff:] is left
	woff     int
	blocked  bool   // registered for Writable
	inflight []*req // written, awaiting replies, in order
	ihead    int
	in       inbuf
	dead     bool // closed after an error: votes no from then on
}

func (m *master) submit(cmd []byte, r *req) {
	if m.dead {
		m.vote(r, false)
		return
	}
	first := len(m.qreqs) == 0
	m.queued = append(m.queued, cmd...)
	m.qreqs = append(m.qreqs, r)
	if first {
		m.s.loop.Kick(m)
	}
}

// Run writes the queued batch when none is in flight (Task).
func (m *master) Run() {
	if m.dead || m.ihead < len(m.inflight) || len(m.qreqs) == 0 {
		return // the replies' arrival writes the next batch
	}
	m.wbuf, m.queued = m.queued, m.wbuf[:0]
	m.woff = 0
	m.inflight, m.qreqs = append(m.inflight[:0], m.qreqs...), m.qreqs[:0]
	m.ihead = 0
	m.write()
}

// write writes the batch; a full socket buffer waits for Writable.
func (m *master) write() {
	n, err := evloop.Write(m.fd, m.wbuf[m.woff:])
	if err != nil && err != syscall.EAGAIN {
		m.fail(fmt.Errorf("write: %w", err))
		return
	}
	m.woff += n
	if blocked := m.woff < len(m.wbuf); blocked != m.blocked {
		m.blocked = blocked
		ev := uint32(evloop.Readable)
		if blocked {
			ev |= evloop.Writable
		}
		if err := m.s.loop.Modify(m.fd, ev); err != nil {
			m.fail(err)
		}
	}
}

// OnEvent reads replies and counts votes, or goes on with a write.
func (m *master) OnEvent(ev uint32) {
	if m.dead {
		return
	}
	if ev&evloop.Writable != 0 && m.woff < len(m.wbuf) {
		if m.write(); m.dead {
			return
		}
	}
	if ev&(evloop.Readable|evloop.Hangup|evloop.Error) == 0 {
		return
	}
	n, err := m.in.read(m.fd)
	if err == syscall.EAGAIN {
		return
	}
	if err == nil && n == 0 {
		err = io.EOF
	}
	if err != nil {
		m.fail(err)
		return
	}
	for b := m.in.unread(); len(b) > 0; b = m.in.unread() {
		rep, used, err := resp.Parse(b)
		if err == resp.ErrIncomplete {
			break
		}
		if err == nil && m.ihead == len(m.inflight) {
			err = errors.New("a reply to no command")
		}
		if err != nil {
			m.fail(fmt.Errorf("bad reply stream: %w", err))
			return
		}
		m.in.consumed(used)
		r := m.inflight[m.ihead]
		m.inflight[m.ihead] = nil
		m.ihead++
		m.vote(r, rep.IsOK())
	}
	if m.ihead == len(m.inflight) && len(m.qreqs) > 0 {
		m.s.loop.Kick(m)
	}
}

// fail closes the master after an error, once: what it was sent and what
// it is sent from now on counts as a no, so that clients are still
// answered by the others (a floor with no deadline would otherwise stall
// them, and a level-triggered fd left registered would spin the loop).
func (m *master) fail(err error) {
	if m.dead {
		return
	}
	m.shut()
	m.s.log.Error("floor: master failed; it votes no until the floor is restarted", "master", m.addr, "err", err)
	lost := append(m.inflight[m.ihead:], m.qreqs...)
	m.inflight, m.ihead, m.qreqs, m.queued = nil, 0, nil, nil
	for _, r := range lost {
		m.vote(r, false)
	}
}

// shut closes the master's connection, once, and marks it dead.
func (m *master) shut() {
	if m.dead {
		return
	}
	m.dead = true
	m.s.loop.Remove(m.fd)
	syscall.Close(m.fd)
}

func (m *master) vote(r *req, yes bool) {
	r.answered++
	if yes {
		r.yes++
	} else {
		r.no++
	}
	if r.reply == nil {
		switch {
		case r.yes >= m.s.q:
			r.reply = replyOK
		case r.no > len(m.s.masters)-m.s.q:
			r.reply = replyNil
		}
		if r.reply != nil && !r.sent {
			r.c.s.loop.Kick(r.c)
		}
	}
	m.s.recycle(r)
}
