package quorum

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Tests at the wire: an Engine built by New over fake masters
// (internal/fakemaster), so that a request goes through the real
// pipelines, their RESP, the monitor's checks and the engine's own timer,
// while the test scripts each master's replies. The fakePipe tests
// (undo_test.go) play the masters one Complete at a time instead; these
// show that the same decisions hold when the replies come off sockets.

// wireEngine starts n fake masters, lets setup (when not nil) prepare
// each before anything connects, and starts an Engine over them with the
// split-vote retry off (retry.go has its own tests); it waits until every
// master's votes count.
func wireEngine(t *testing.T, n int, setup func(*fakemaster.Master), opts ...func(*Config)) (*Engine, []*fakemaster.Master) {
	t.Helper()
	var ms []*fakemaster.Master
	cfg := Config{NodeTimeout: 50 * time.Millisecond, SplitRetryJitter: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for range n {
		m := fakemaster.Start(t)
		if setup != nil {
			setup(m)
		}
		ms = append(ms, m)
		cfg.Masters = append(cfg.Masters, m.Addr())
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close) // before the masters close: cleanups run last first
	deadline := time.Now().Add(10 * time.Second)
	for !allCount(e) {
		if time.Now().After(deadline) {
			t.Fatalf("the fake masters' votes do not count within 10s: %+v", e.Masters())
		}
		time.Sleep(time.Millisecond)
	}
	return e, ms
}

// allCount reports whether every master is up and its votes count.
func allCount(e *Engine) bool {
	for _, m := range e.Masters() {
		if !m.Up || !m.QuarantinedUntil.IsZero() || m.Excluded != "" {
			return false
		}
	}
	return true
}

// decide submits r and waits for its decision.
func decide(t *testing.T, e *Engine, r *Request) *Request {
	t.Helper()
	w := NewWaiter()
	e.Submit(w, r)
	done := make(chan struct{})
	go func() { e.Wait(w); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not decided within 10s")
	}
	return r
}

// drain waits until every master has answered everything sent to it,
// late replies and the undos they cause included.
func drain(t *testing.T, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Drain(ctx); err != nil {
		t.Fatalf("masters not drained: %v", err)
	}
}

// undoesOf counts the undos (compare-and-delete of key and token) m got.
func undoesOf(m *fakemaster.Master, key, token string) int {
	return m.Count("EVALSHA", undoScript.SHA1, "1", key, token)
}

var (
	replyOne  = resp.Reply{Type: resp.Integer, Int: 1}
	replyZero = resp.Reply{Type: resp.Integer, Int: 0}
)

// TestWireCredentials: the masters want an ACL user's password that
// holds the word AUTH, RESP framing and bytes that are not UTF-8. Both of
// the engine's connections to each master, the pipeline and the monitor's
// (whose check must pass before the master votes), authenticate with it,
// and locks are granted.
func TestWireCredentials(t *testing.T) {
	const pass = "AUTH \r\n*2\r\n$4\r\nAUTH\r\n\x00\xff"
	e, ms := wireEngine(t, 3, func(m *fakemaster.Master) {
		m.RequirePass("lp", pass)
		m.On("SET").Reply(resp.ReplyOK)
	}, func(c *Config) { c.MasterUsername, c.MasterPassword = "lp", pass })
	r := decide(t, e, e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now()))
	if r.Outcome() != Granted {
		t.Fatalf("acquire over masters that want a password: %v %v", r.reply, r.err)
	}
	for i, m := range ms {
		conns := map[int]bool{}
		for _, c := range m.Received() {
			if c.Is("AUTH", "lp", pass) {
				conns[c.Conn] = true
			}
		}
		if len(conns) < 2 {
			t.Fatalf("master %d: AUTH on %d connections, want the pipeline's and the monitor's: %v", i, len(conns), m.Received())
		}
	}
}
