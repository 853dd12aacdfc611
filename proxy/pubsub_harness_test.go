package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// lazyPublisher lets a hub be made before the engine it publishes through
// (a clusterOpt runs before the engine exists).
type lazyPublisher struct{ e atomic.Pointer[quorum.Engine] }

func (p *lazyPublisher) Publish(ch string, b []byte) {
	if e := p.e.Load(); e != nil {
		e.Publish(ch, b)
	}
}

// hubPublishers maps each test hub to its publisher, for startFront.
var hubPublishers sync.Map // *pubsub.Hub → *lazyPublisher

// withHub gives the proxy a pub/sub hub on its masters, with
// notify-keyspace-events ks, and more settings from f.
func withHub(t testing.TB, ks string, f ...func(*proxy.Config, *pubsub.Config)) clusterOpt {
	return func(pc *proxy.Config, qc *quorum.Config) {
		pub := &lazyPublisher{}
		hc := pubsub.Config{Masters: qc.Masters, Publisher: pub, KeyspaceEvents: ks,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for _, g := range f {
			g(pc, &hc)
		}
		h, err := pubsub.New(hc)
		if err != nil {
			t.Fatal(err)
		}
		hubPublishers.Store(h, pub)
		pc.Hub = h
	}
}

// wireHub points c's hub at its engine, and closes the hub after the
// proxy (t.Cleanup runs last-registered first).
func (c *cluster) wireHub(pc *proxy.Config) {
	if pc.Hub == nil {
		return
	}
	p, _ := hubPublishers.Load(pc.Hub)
	p.(*lazyPublisher).e.Store(c.engine)
	h := pc.Hub
	c.t.Cleanup(h.Close)
	c.hub = h
}

// startHubFront is startFront with a hub, on masters another proxy may
// share; it waits until the hub listens on every master.
func startHubFront(t testing.TB, masters []*redisproc.Server, ks string, opts ...clusterOpt) *cluster {
	t.Helper()
	c := startFront(t, masters, false, append([]clusterOpt{withHub(t, ks)}, opts...)...)
	c.waitUp(len(masters))
	c.waitVoting(len(masters))
	c.waitHub()
	return c
}

// waitHub waits until the hub's connections to every master are up.
func (c *cluster) waitHub() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.hub.Stats().MastersUp < len(c.masters) {
		if time.Now().After(deadline) {
			c.t.Fatalf("pub/sub hub not connected to every master within 10s: %+v", c.hub.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// respConn is a raw client connection that reads RESP frames as text
// lines, for exact framing checks.
type respConn struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
}

func (c *cluster) respConn() *respConn {
	conn := c.dial()
	c.t.Cleanup(func() { conn.Close() })
	return &respConn{t: c.t, conn: conn, r: bufio.NewReader(conn)}
}

// send writes one command.
func (rc *respConn) send(args ...string) {
	rc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := rc.conn.Write([]byte(b.String())); err != nil {
		rc.t.Fatal(err)
	}
}

// frame reads one whole reply and returns it as sent, within wait.
func (rc *respConn) frame(wait time.Duration) (string, error) {
	rc.conn.SetReadDeadline(time.Now().Add(wait))
	var b strings.Builder
	if err := rc.readOne(&b); err != nil {
		return b.String(), err
	}
	return b.String(), nil
}

// mustFrame is frame that fails the test on a timeout or a closed
// connection.
func (rc *respConn) mustFrame(wait time.Duration) string {
	rc.t.Helper()
	f, err := rc.frame(wait)
	if err != nil {
		rc.t.Fatalf("reading a reply: %v (got %q)", err, f)
	}
	return f
}

func (rc *respConn) readOne(b *strings.Builder) error {
	line, err := rc.r.ReadString('\n')
	b.WriteString(line)
	if err != nil {
		return err
	}
	if len(line) < 3 {
		return fmt.Errorf("short line %q", line)
	}
	n, _ := strconv.Atoi(strings.TrimRight(line[1:], "\r\n"))
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, buf); err != nil {
			return err
		}
		b.Write(buf)
	case '*', '>', '~':
		for i := 0; i < n; i++ {
			if err := rc.readOne(b); err != nil {
				return err
			}
		}
	case '%':
		for i := 0; i < 2*n; i++ {
			if err := rc.readOne(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// none checks that nothing more arrives within wait.
func (rc *respConn) none(wait time.Duration) {
	rc.t.Helper()
	if f, err := rc.frame(wait); err == nil || f != "" {
		rc.t.Fatalf("unexpected frame %q (err %v)", f, err)
	}
}

// bulk frames a bulk string.
func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// pushFrame frames an out-of-band message as Redis does: an array in
// RESP2, a push in RESP3.
func pushFrame(resp3 bool, elems ...string) string {
	h := "*"
	if resp3 {
		h = ">"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d\r\n", h, len(elems))
	for _, e := range elems {
		if strings.HasPrefix(e, ":") {
			b.WriteString(e + "\r\n")
			continue
		}
		b.WriteString(bulk(e))
	}
	return b.String()
}
