package proxy_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// relay is a TCP forwarder in front of one master that the test can cut
// (a network partition: every connection closed, new ones closed at once)
// and heal. A cut master keeps its data: no restart, no quarantine.
type relay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newRelay(t testing.TB, target string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	go r.serve()
	t.Cleanup(func() { ln.Close(); r.setCut(true) })
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.cut {
			r.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", r.target)
		if err != nil {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns = append(r.conns, c, u)
		r.mu.Unlock()
		go func() { io.Copy(u, c); u.Close(); c.Close() }()
		go func() { io.Copy(c, u); u.Close(); c.Close() }()
	}
}

func (r *relay) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for _, c := range r.conns {
			c.Close()
		}
		r.conns = nil
	}
}

// startRelayed starts n masters behind relays and a lockproxy that reaches
// them through the relays.
func startRelayed(t *testing.T, n int, opts ...clusterOpt) (*cluster, []*relay) {
	t.Helper()
	var relays []*relay
	all := append([]clusterOpt{func(_ *proxy.Config, qc *quorum.Config) {
		for i, a := range qc.Masters {
			r := newRelay(t, a)
			relays = append(relays, r)
			qc.Masters[i] = r.addr()
		}
		qc.NodeTimeout = 100 * time.Millisecond
	}}, opts...)
	c := startCluster(t, n, all...)
	return c, relays
}

// partition cuts master i off and waits until lockproxy sees it down.
func (c *cluster) partition(r []*relay, i int) {
	c.t.Helper()
	r[i].setCut(true)
	waitFor(c.t.(*testing.T), func() bool { return !c.engine.Masters()[i].Up }, "master down after the cut")
}

// heal reconnects master i and waits until every master votes.
func (c *cluster) heal(r []*relay, i int) {
	c.t.Helper()
	r[i].setCut(false)
	c.waitVoting(len(c.masters))
}
