package pubsub

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// ConnPublisher is a Publisher on a plain connection per master, for tests
// and tools; lockproxy itself publishes through its engine's pipelines.
// Each Publish writes to every master in parallel and waits for the
// replies (at most the timeout given); a failed connection is dialled again on the
// next call.
type ConnPublisher struct {
	masters []string
	dial    DialFunc
	auth    []byte
	timeout time.Duration

	mu    sync.Mutex // serializes calls: each connection carries one command at a time
	conns []*pubConn
}

type pubConn struct {
	c  net.Conn
	rd *resp.Reader
}

var _ Publisher = (*ConnPublisher)(nil)

// NewConnPublisher publishes to masters (dial nil: plain TCP), with AUTH
// when password is set. timeout 0 means 1s.
func NewConnPublisher(masters []string, dial DialFunc, username, password string, timeout time.Duration) *ConnPublisher {
	if dial == nil {
		d := &net.Dialer{}
		dial = d.DialContext
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	p := &ConnPublisher{masters: masters, dial: dial, timeout: timeout, conns: make([]*pubConn, len(masters))}
	switch {
	case password != "" && username != "":
		p.auth = resp.AppendCommandString(nil, "AUTH", username, password)
	case password != "":
		p.auth = resp.AppendCommandString(nil, "AUTH", password)
	}
	return p
}

// Publish implements Publisher.
func (p *ConnPublisher) Publish(channel string, payload []byte) {
	p.PublishReplies("PUBLISH", channel, payload)
}

// PublishReplies sends cmd (PUBLISH or SPUBLISH) to every master and
// returns each one's integer reply, -1 where it failed: what Receivers
// takes.
func (p *ConnPublisher) PublishReplies(cmd, channel string, payload []byte) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	replies := make([]int64, len(p.masters))
	msg := resp.AppendCommand(nil, []byte(cmd), []byte(channel), payload)
	var wg sync.WaitGroup
	for i := range p.masters {
		wg.Go(func() {
			n, err := p.one(i, msg)
			if err != nil {
				n = -1
				if c := p.conns[i]; c != nil {
					c.c.Close()
					p.conns[i] = nil
				}
			}
			replies[i] = n
		})
	}
	wg.Wait()
	return replies
}

// one sends msg to master i and reads its integer reply.
func (p *ConnPublisher) one(i int, msg []byte) (int64, error) {
	deadline := time.Now().Add(p.timeout)
	c := p.conns[i]
	fresh := c == nil && p.auth != nil
	if c == nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		conn, err := p.dial(ctx, "tcp", p.masters[i])
		cancel()
		if err != nil {
			return 0, err
		}
		rd := resp.NewReader(conn, 4096)
		rd.MaxBulk = 1 << 20
		c = &pubConn{c: conn, rd: rd}
		p.conns[i] = c
		if fresh {
			msg = append(append([]byte(nil), p.auth...), msg...)
		}
	}
	c.c.SetDeadline(deadline)
	if _, err := c.c.Write(msg); err != nil {
		return 0, err
	}
	if fresh {
		if r, err := c.rd.Next(); err != nil || r.Type == resp.Error {
			return 0, fmt.Errorf("AUTH: %v %s", err, r.Str)
		}
	}
	r, err := c.rd.Next()
	if err != nil {
		return 0, err
	}
	if r.Type != resp.Integer {
		return 0, fmt.Errorf("%s answered %s", p.masters[i], r)
	}
	return r.Int, nil
}

// Close closes the connections.
func (p *ConnPublisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.conns {
		if c != nil {
			c.c.Close()
			p.conns[i] = nil
		}
	}
}
