package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// cluster is n real masters with a lockproxy in front, all started by the
// test and stopped by its cleanup.
type cluster struct {
	t       testing.TB
	masters []*redisproc.Server
	engine  *quorum.Engine
	srv     *proxy.Server
	addr    string
}

type clusterOpt func(*proxy.Config, *quorum.Config)

func startCluster(t testing.TB, n int, opts ...clusterOpt) *cluster {
	t.Helper()
	c := startFront(t, redisproc.ForTest(t, n), opts...)
	c.waitUp(n)
	return c
}

// startFront starts a lockproxy in this process in front of masters that
// the test started (several lockproxies may share them) and stops it with
// the test. It does not wait for the masters.
func startFront(t testing.TB, masters []*redisproc.Server, opts ...clusterOpt) *cluster {
	t.Helper()
	c := &cluster{t: t, masters: masters}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cat, err := proxy.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, s := range cat.Scripts() {
		bodies = append(bodies, s.Body)
	}
	// 250ms, not the 50ms default: the suite runs under -race on a loaded
	// 2-core CI machine, and these tests check outcomes, not speed (tests
	// of timing set their own node_timeout).
	qc := quorum.Config{NodeTimeout: 250 * time.Millisecond, MaxTTL: time.Minute, Scripts: bodies, Logger: logger}
	for _, m := range c.masters {
		qc.Masters = append(qc.Masters, m.Addr)
	}
	pc := proxy.Config{Catalog: cat, Logger: logger, Version: "test"}
	for _, o := range opts {
		o(&pc, &qc)
	}
	c.engine, err = quorum.New(qc)
	if err != nil {
		t.Fatal(err)
	}
	pc.Engine = c.engine
	c.srv, err = proxy.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	served := make(chan struct{})
	go func() { c.srv.Serve(ln); close(served) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.srv.Shutdown(ctx)
		<-served
		c.engine.Close()
	})
	return c
}

// waitUp polls until up masters are connected.
func (c *cluster) waitUp(up int) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for _, m := range c.engine.Masters() {
			if m.Up {
				n++
			}
		}
		if n >= up {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("masters not connected within 10s: %+v", c.engine.Masters())
}

func (c *cluster) client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: c.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true}
	for _, f := range opts {
		f(o)
	}
	cl := redis.NewClient(o)
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// onMasters returns GET key on each master ("(nil)" when missing).
func (c *cluster) onMasters(key string) []string {
	c.t.Helper()
	out := make([]string, len(c.masters))
	for i, m := range c.masters {
		v, err := m.Do("GET", key)
		if err != nil {
			c.t.Fatalf("GET %s on master %d: %v", key, i, err)
		}
		out[i] = v
	}
	return out
}

func count(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
