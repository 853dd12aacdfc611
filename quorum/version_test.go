package quorum

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// syncBuffer is a log destination the pipelines' goroutines write to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOldMasterRefused: a master older than Redis 7.0 (here a fake one
// reporting 6.2.16) is refused when its connection is set up: it gets
// INFO server on its pipeline and nothing else, no script and no lock
// command, so no script of lockproxy's or a client's can fail half-way on
// it (or pass a guard that reads PEXPIRETIME). It counts as down, with an error that
// names it, its version and the upgrade; the refusal is logged once
// although the pipeline redials; the version shows in Masters(). With
// two of three masters refused, an acquisition is NOQUORUM, and the one
// 7.0 master's copy is undone.
func TestOldMasterRefused(t *testing.T) {
	var logs syncBuffer
	var ms []*fakemaster.Master
	cfg := Config{NodeTimeout: 50 * time.Millisecond, SplitRetryJitter: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	for i := range 3 {
		m := fakemaster.Start(t)
		if i > 0 {
			m.SetInfoServer("# Server\r\nredis_version:6.2.16\r\nredis_mode:standalone\r\n")
		}
		m.On("SET").Reply(resp.ReplyOK)
		m.On("EVALSHA", undoScript.SHA1).Reply(replyOne)
		ms = append(ms, m)
		cfg.Masters = append(cfg.Masters, m.Addr())
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	// Two refusals each (a redial) before looking.
	for _, m := range ms[1:] {
		m.WaitFor(t, "a redial's INFO server", func(cs []fakemaster.Command) bool {
			n := 0
			for _, c := range cs {
				if c.Is("INFO", "server") {
					n++
				}
			}
			return n >= 2
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for !e.Masters()[0].Voting() {
		if time.Now().After(deadline) {
			t.Fatalf("the 7.0 master does not vote within 10s: %+v", e.Masters()[0])
		}
		time.Sleep(time.Millisecond)
	}
	st := e.Masters()
	if v := st[0].Server; v.Server != "redis" || v.Version != "7.0.15" {
		t.Errorf("master 0's version %+v, want redis 7.0.15", v)
	}
	for i, s := range st[1:] {
		var old *OldMasterError
		if s.Up || !errors.As(s.Err, &old) || s.Server.Version != "6.2.16" {
			t.Fatalf("master %d: up %v, err %v, version %+v; want down, refused as 6.2.16", i+1, s.Up, s.Err, s.Server)
		}
		for _, want := range []string{ms[i+1].Addr(), "redis 6.2.16", "upgrade it to Redis 7.0"} {
			if !strings.Contains(s.Err.Error(), want) {
				t.Errorf("master %d's error %q does not say %q", i+1, s.Err, want)
			}
		}
	}

	r := decide(t, e, e.Acquire([]byte("k"), []byte("tok"), 5*time.Second, batching.Now()))
	var nq *NoQuorumError
	if _, err := r.Result(); !errors.As(err, &nq) || !strings.Contains(err.Error(), "older than Redis 7.0") {
		t.Fatalf("acquisition over one usable master of 3: %v, want NOQUORUM naming the old masters", err)
	}
	drain(t, e)
	if n := ms[0].Count("EVALSHA", undoScript.SHA1); n != 1 {
		t.Errorf("the 7.0 master's copy undone %d times, want 1", n)
	}
	// The restart monitor keeps its own connection and marker there (an
	// upgrade restarts the master, which the marker must tell); the
	// pipeline, which carries every lock command and script, sent nothing
	// past INFO server.
	for i, m := range ms[1:] {
		if n := m.Count("SET") + m.Count("SCRIPT", "LOAD") + m.Count("EVALSHA", undoScript.SHA1); n != 0 {
			t.Errorf("refused master %d was sent %d lock commands or scripts: %v", i+1, n, m.Received())
		}
	}
	for _, m := range ms[1:] {
		if n := strings.Count(logs.String(), "master refused: master "+m.Addr()); n != 1 {
			t.Errorf("the refusal of %s logged %d times, want once:\n%s", m.Addr(), n, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "version=6.2.16") {
		t.Errorf("the refusal's log line has no version=6.2.16:\n%s", logs.String())
	}
}

// TestValkeyMasterVotes: Valkey 8 reports redis_version 7.2.4 and its own
// version apart; it is accepted, and Masters() shows both.
func TestValkeyMasterVotes(t *testing.T) {
	e, _ := wireEngine(t, 3, func(m *fakemaster.Master) {
		m.SetInfoServer("# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n")
	})
	for i, s := range e.Masters() {
		if v := s.Server; v.Server != "valkey" || v.Version != "8.0.1" || v.Redis != "7.2.4" {
			t.Errorf("master %d: %+v, want valkey 8.0.1 with redis_version 7.2.4", i, v)
		}
	}
}
