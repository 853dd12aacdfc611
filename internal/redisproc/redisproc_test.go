package redisproc

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestBinary(t *testing.T) {
	p, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(p) {
		t.Errorf("Binary() = %q, want an absolute path", p)
	}
}

func TestBinaryMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBinary("", filepath.Join(t.TempDir(), "redis-server"))
	if err == nil || !strings.Contains(err.Error(), installHint) {
		t.Fatalf("findBinary error = %v, want one that says %q", err, installHint)
	}
}

// TestBinaryFromEnv: LOCKPROXY_REDIS_SERVER wins over PATH, and one naming
// nothing runnable fails rather than falling back to another version.
func TestBinaryFromEnv(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "my-redis-server")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findBinary(bin, "/usr/bin/redis-server"); err != nil || got != bin {
		t.Fatalf("findBinary(%q) = %q, %v; want that path", bin, got, err)
	}
	missing := filepath.Join(dir, "nothing-here")
	_, err := findBinary(missing, "/usr/bin/redis-server")
	if err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Fatalf("findBinary(%q) error = %v, want one naming %s", missing, err, EnvBinary)
	}
}

func TestSetGetPauseResumeKillRestart(t *testing.T) {
	s := ForTest(t, 1)[0]
	if s.Addr != "127.0.0.1:"+strconv.Itoa(s.Port) {
		t.Fatalf("Addr = %q, Port = %d", s.Addr, s.Port)
	}
	do := func(want string, args ...string) {
		t.Helper()
		got, err := s.Do(args...)
		if err != nil || got != want {
			t.Fatalf("Do(%q) = %q, %v; want %q", args, got, err, want)
		}
	}
	do("PONG", "PING")
	do("OK", "SET", "k", "v with spaces")
	do("v with spaces", "GET", "k")
	do("(nil)", "GET", "missing")
	do("1", "EXISTS", "k")
	do("a b", "EVAL", "return {'a', 'b'}", "0")
	if _, err := s.Do("NOSUCHCOMMAND"); !errors.As(err, new(ReplyError)) || !strings.HasPrefix(err.Error(), "ERR ") {
		t.Fatalf("unknown command: err = %v, want a ReplyError starting with ERR", err)
	}
	// The server persists nothing.
	do("save ", "CONFIG", "GET", "save") // "save" and its empty value
	do("appendonly no", "CONFIG", "GET", "appendonly")
	pid := s.Pid()

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("PING"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("PING to a paused server: err = %v, want a deadline error", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	do("PONG", "PING")
	do("v with spaces", "GET", "k")

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING to a killed server succeeded")
	}
	if err := s.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Pause after Kill: err = %v, want ErrNotRunning", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Pid() == pid {
		t.Fatalf("Restart kept pid %d", pid)
	}
	do("(nil)", "GET", "k") // the data died with the process
	do("0", "DBSIZE")
	if !strings.HasSuffix(s.Addr, ":"+strconv.Itoa(s.Port)) {
		t.Fatalf("Restart moved the server to %s", s.Addr)
	}
}

func TestStopIdempotentAndPaused(t *testing.T) {
	s := ForTest(t, 1)[0]
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	// Stop of a paused server must not hang on the pending SIGTERM.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING to a stopped server succeeded")
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill after Stop: %v", err)
	}
}

func TestStartN(t *testing.T) {
	servers := ForTest(t, 5)
	ports := map[int]bool{}
	dirs := map[string]bool{}
	for i, s := range servers {
		if ports[s.Port] || dirs[s.Dir] {
			t.Fatalf("server %d shares port %d or dir %s", i, s.Port, s.Dir)
		}
		ports[s.Port], dirs[s.Dir] = true, true
		if _, err := s.Do("SET", "who", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range servers {
		if got, err := s.Do("GET", "who"); err != nil || got != strconv.Itoa(i) {
			t.Fatalf("server %d: GET who = %q, %v", i, got, err)
		}
		if _, err := os.Stat(s.LogFile); err != nil {
			t.Errorf("server %d has no log: %v", i, err)
		}
	}
}

func TestBoundToLoopbackOnly(t *testing.T) {
	s := ForTest(t, 1)[0]
	got, err := s.Do("CONFIG", "GET", "bind")
	if err != nil {
		t.Fatal(err)
	}
	if got != "bind 127.0.0.1" {
		t.Fatalf("CONFIG GET bind = %q", got)
	}
}

func TestStartOnTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s, err := Start(Options{Dir: t.TempDir(), Port: port})
	if err == nil {
		s.Stop()
		t.Fatalf("Start on taken port %d succeeded", port)
	}
	if !errors.Is(err, errPortInUse) || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("Start on a taken port: err = %v, want the bind error from the log", err)
	}
}

// TestStartRejectsImpostor: when another redis-server already answers on
// the port, Start must not mistake it for its own.
func TestStartRejectsImpostor(t *testing.T) {
	other := ForTest(t, 1)[0]
	s, err := Start(Options{Dir: t.TempDir(), Port: other.Port})
	if err == nil {
		s.Stop()
		t.Fatal("Start on the port of another redis-server succeeded")
	}
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("err = %v, want errPortInUse", err)
	}
	if _, err := other.Do("PING"); err != nil {
		t.Fatalf("the other server was disturbed: %v", err)
	}
}

func TestExtraArgsRequirepass(t *testing.T) {
	s, err := Start(Options{Dir: t.TempDir(), ExtraArgs: []string{"--requirepass", "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	if _, err := s.Do("GET", "k"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("GET without AUTH: err = %v, want NOAUTH", err)
	}
}

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"+OK\r\n", "OK", ""},
		{":-2\r\n", "-2", ""},
		{"$5\r\na\r\nbc\r\n", "a\r\nbc", ""},
		{"$0\r\n\r\n", "", ""},
		{"$-1\r\n", "(nil)", ""},
		{"*-1\r\n", "(nil)", ""},
		{"*0\r\n", "", ""},
		{"*3\r\n$1\r\na\r\n:1\r\n$-1\r\n", "a 1 (nil)", ""},
		{"*2\r\n*1\r\n+x\r\n+y\r\n", "x y", ""},
		{"-NOSCRIPT No matching script\r\n", "", "NOSCRIPT No matching script"},
		{"*2\r\n+OK\r\n-ERR boom\r\n", "", "ERR boom"},
		{"%1\r\n", "", "malformed"},
	} {
		got, err := readReply(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("readReply(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("readReply(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestConcurrentControl: chaos tests pause, kill and restart masters from
// several goroutines while others check them.
func TestConcurrentControl(t *testing.T) {
	s := ForTest(t, 1)[0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			s.Pid()
			s.Do("PING") // may fail: the server is being controlled
		}
	}()
	for i := range 5 {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			// Restart of a paused server kills it first.
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
		} else if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Do("PING"); err != nil || got != "PONG" {
			t.Fatalf("round %d: PING = %q, %v", i, got, err)
		}
	}
	<-done
}
