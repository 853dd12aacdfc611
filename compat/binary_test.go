package compat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// buildLockproxy builds cmd/lockproxy into a temporary directory.
func buildLockproxy(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockproxy")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/lockproxy").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ../cmd/lockproxy: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// configWith is a config.toml for the shared masters with extra appended.
func (e *env) configWith(t *testing.T, listen, extra string) string {
	t.Helper()
	var masters []string
	for _, m := range e.masters {
		masters = append(masters, fmt.Sprintf("%q", m.Addr))
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	cfg := fmt.Sprintf("listen = %q\nmetrics_listen = \"\"\n\n[quorum]\nmasters = [%s]\nquarantine = false\nbootstrap = true\n\n%s",
		listen, strings.Join(masters, ", "), extra)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// docTOML is the ```toml block of docs/compat.md as written.
func docTOML(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/compat.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/compat.md has no ```toml block")
	}
	return string(m[1])
}

// TestBinaryCustomScripts: the lockproxy binary, started with docs/compat.md's
// [[scripts]] example in its config.toml, runs the registered scripts; a
// [[scripts]] entry that cannot work stops it at start with exit status 2
// and a message naming the entry and the field.
func TestBinaryCustomScripts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	bin := buildLockproxy(t)
	ctx := context.Background()

	// A bad entry: an acquire script without token_arg (no undo possible).
	bad := e.configWith(t, freeAddr(t), `[[scripts]]
name = "my-acquire"
body = 'return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])'
kind = "acquire"
vote = "ok"
ttl_arg = 2
ttl_unit = "ms"
`)
	out, err := exec.Command(bin, "-config", bad).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `scripts[0] "my-acquire"`) || !strings.Contains(string(out), "token_arg") {
		t.Fatalf("lockproxy with an acquire script without token_arg: %v, output:\n%s\nwant exit status 2 and a message naming scripts[0] \"my-acquire\" and token_arg", err, out)
	}

	// The documented example.
	addr := freeAddr(t)
	cmd := exec.Command(bin, "-config", e.configWith(t, addr, docTOML(t)))
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if !poll(func() bool { return c.Ping(ctx).Err() == nil }) {
		t.Fatalf("lockproxy does not answer PING on %s; its output:\n%s", addr, logs.String())
	}
	// It answers PING before it has connected to its masters: a lock
	// command sent in between is refused with NOQUORUM "not connected
	// yet", which is right, and not what this test is about.
	if !poll(func() bool {
		info, err := c.Info(ctx, "quorum").Result()
		return err == nil && strings.Count(info, ",state=up,") == len(e.masters)
	}) {
		info, _ := c.Info(ctx, "quorum").Result()
		t.Fatalf("lockproxy on %s: not every one of its %d masters up:\n%s\nits output:\n%s", addr, len(e.masters), info, logs.String())
	}
	key := prefixOf(t) + "lock"
	docs := docScripts(t)
	if v, err := c.Eval(ctx, docs[0].Body, []string{key}, "tok", 5000, "yes").Result(); v != "OK" || err != nil {
		t.Fatalf("%s = %v, %v", docs[0].Name, v, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if v, err := c.Eval(ctx, docs[1].Body, []string{key}, "tok", 9000).Result(); v != int64(1) || err != nil {
		t.Fatalf("%s = %v, %v", docs[1].Name, v, err)
	}
	must(t, e.checkPTTL(t, key, 8000, 9000))
	if v, err := c.Eval(ctx, docs[2].Body, []string{key}, "other").Result(); v != int64(0) || err != nil {
		t.Fatalf("%s with a stranger's token = %v, %v", docs[2].Name, v, err)
	}
	if v, err := c.Eval(ctx, docs[2].Body, []string{key}, "tok").Result(); v != int64(1) || err != nil {
		t.Fatalf("%s = %v, %v", docs[2].Name, v, err)
	}
	must(t, e.checkGone(t, key))

	// SIGTERM: a clean stop, exit status 0.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("lockproxy after SIGTERM: %v; output:\n%s", waitErr, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("lockproxy still running 10s after SIGTERM; output:\n%s", logs.String())
	}
	must(t, e.checkKeys(t, prefixOf(t)))
}

// syncBuffer is a bytes.Buffer that a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex // protects b
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
