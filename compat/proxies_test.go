package compat

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// proxyFor starts a lockproxy of its own for t on the shared masters, with
// pc's settings (DefaultTTL…) and custom scripts; it stops with t.
func (e *env) proxyFor(t *testing.T, pc proxy.Config, custom []catalog.ScriptConfig) string {
	t.Helper()
	addr, stop, err := startProxy(e.masters, pc, custom)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// startProxy starts an in-process lockproxy on a free port of 127.0.0.1 in
// front of masters, as cmd/lockproxy wires it (engine, pub/sub hub
// publishing through the engine, server), and returns once it has a
// connection to every master, both the engine's and the hub's: a client
// that subscribes at once is then confirmed by every master, and a waiter
// on another proxy hears this one's events.
func startProxy(masters []*redisproc.Server, pc proxy.Config, custom []catalog.ScriptConfig) (addr string, stop func(), err error) {
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr)
	}
	return startProxyAt(addrs, pc, custom)
}

// startProxyAt is startProxy in front of masters reached at addrs (which
// may be relays in front of them).
func startProxyAt(addrs []string, pc proxy.Config, custom []catalog.ScriptConfig) (addr string, stop func(), err error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cat, err := catalog.New(custom)
	if err != nil {
		return "", nil, err
	}
	bodies := cat.MasterScripts()
	// node_timeout 250ms, not the default 50ms: the suite runs under -race
	// beside the other packages' tests, node, python and redis-benchmark
	// on 2 cores, where a writer goroutine can wait past 50ms to be
	// scheduled. The suite checks what libraries see, not latency; a
	// master that misses it still counts as no vote.
	qc := quorum.Config{NodeTimeout: 250 * time.Millisecond, MaxTTL: time.Minute, Scripts: bodies, Logger: logger, Masters: addrs}
	engine, err := quorum.New(qc)
	if err != nil {
		return "", nil, err
	}
	// As cmd/lockproxy: a message waits for a quorum of masters' copies,
	// or node_timeout after its first.
	hub, err := pubsub.New(pubsub.Config{Masters: qc.Masters, Publisher: engine, Logger: logger,
		Quorum: engine.Q(), HoldBack: engine.Config().NodeTimeout})
	if err != nil {
		engine.Close()
		return "", nil, err
	}
	pc.Engine, pc.Catalog, pc.Hub, pc.Logger, pc.Version = engine, cat, hub, logger, "compat-test"
	srv, err := proxy.New(pc)
	if err != nil {
		hub.Close()
		engine.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hub.Close()
		engine.Close()
		return "", nil, err
	}
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()
	// The hub goes after the client connections (their Hub.Remove) and
	// before the engine it publishes through, as in cmd/lockproxy.
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
		hub.Close()
		engine.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		up := 0
		for _, m := range engine.Masters() {
			if m.Voting() {
				up++
			}
		}
		hubUp := hub.Stats().MastersUp
		if up == len(addrs) && hubUp == len(addrs) {
			return ln.Addr().String(), stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("lockproxy: %d of %d masters voting, pub/sub hub connected to %d, after 10s: %+v", up, len(addrs), hubUp, engine.Masters())
		}
	}
}
