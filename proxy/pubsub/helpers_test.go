package pubsub

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// recorder is a Subscriber that keeps what it gets.
type recorder struct {
	mu   sync.Mutex
	msgs []Message
}

func (r *recorder) Deliver(m Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
}

func (r *recorder) got() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.msgs...)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// payloads renders what r got as "channel=payload" (with the pattern
// first for pmessages), in order.
func (r *recorder) payloads() []string {
	var out []string
	for _, m := range r.got() {
		s := m.Channel + "=" + string(m.Payload)
		if m.Kind == Pattern {
			s = m.Pattern + ">" + s
		}
		out = append(out, s)
	}
	return out
}

func addrs(masters []*redisproc.Server) []string {
	var a []string
	for _, m := range masters {
		a = append(a, m.Addr)
	}
	return a
}

// testConfig is Config with timings short enough for tests.
func testConfig(t testing.TB, masters []*redisproc.Server) Config {
	return Config{
		Masters:      addrs(masters),
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryMin:     5 * time.Millisecond,
		RetryMax:     50 * time.Millisecond,
		PingInterval: 100 * time.Millisecond,
		ReadTimeout:  time.Second,
		DialTimeout:  500 * time.Millisecond,
	}
}

func startHub(t testing.TB, cfg Config) *Hub {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// confirmedOn counts the masters on which the hub's subscription is
// confirmed.
func (h *Hub) confirmedOn(kind Kind, name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	if r := h.recs[recKey{kind, name}]; r != nil {
		for i := range h.masters {
			if r.confirmed&(1<<i) != 0 {
				n++
			}
		}
	}
	return n
}

// subscribe subscribes s and waits until want masters confirmed it.
func subscribe(t testing.TB, h *Hub, s Subscriber, kind Kind, name string, want int) {
	t.Helper()
	if _, err := h.Subscribe(s, kind, name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscription "+name+" confirmed", func() bool { return h.confirmedOn(kind, name) >= want })
}

// ready waits until every master confirmed the hub's events channel.
func ready(t testing.TB, h *Hub) {
	t.Helper()
	waitFor(t, "hub subscribed on every master", func() bool {
		return h.confirmedOn(Channel, h.cfg.EventsChannel) == len(h.masters)
	})
}

// do runs one command on a master and fails the test on an error.
func do(t testing.TB, m *redisproc.Server, args ...string) string {
	t.Helper()
	r, err := m.Do(args...)
	if err != nil {
		t.Fatalf("%s %v: %v", m.Addr, args, err)
	}
	return r
}

// onEvery runs f on every master at once, as the engine's fan-out does.
func onEvery(masters []*redisproc.Server, f func(m *redisproc.Server)) {
	var wg sync.WaitGroup
	for _, m := range masters {
		wg.Go(func() { f(m) })
	}
	wg.Wait()
}

// rawConn is a plain client connection to a master, for subscribing
// directly (ground truth and direct receivers).
type rawConn struct {
	c  net.Conn
	rd *resp.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, rd: resp.NewReader(c, 4096)}
}

func (rc *rawConn) send(t testing.TB, args ...string) {
	t.Helper()
	if _, err := rc.c.Write(resp.AppendCommandString(nil, args...)); err != nil {
		t.Fatal(err)
	}
}

func (rc *rawConn) next(t testing.TB) resp.Reply {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := rc.rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
