package proxy

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// Fuzz test of one command through the whole command path (parse, quorum
// request, reply). The byte stream's fuzzers (the guard, the splitter, the
// reply parser) are internal/resp's.
//
//	go test -run XXX -fuzz 'FuzzCommand$' -fuzztime 60s ./proxy/

// fuzzServer is a Server whose engine has no reachable master: every
// quorum request is decided at once (NOQUORUM), so the fuzzer runs the
// whole command path without a network.
func fuzzServer(f *testing.F) *Server {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := quorum.New(quorum.Config{Masters: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, MaxTTL: 10 * time.Second, Logger: logger})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(e.Close)
	cat, err := catalog.New(nil)
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{Engine: e, Catalog: cat, DefaultTTL: 5 * time.Second, Logger: logger})
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// FuzzCommand: any command gets exactly one well-formed reply and never
// panics, and what it sends to the masters is one of the operations
// lockproxy means to send: SET key token NX PX <ms within max_ttl>, GET,
// PEXPIRE <ms within max_ttl>, or EVALSHA of a catalogued or internal
// script.
func FuzzCommand(f *testing.F) {
	s := fuzzServer(f)
	allowed := map[string]bool{}
	for _, sc := range s.cfg.Catalog.Scripts() {
		allowed[sc.SHA1] = true
	}
	for _, sc := range quorum.InternalScripts() {
		allowed[sc.SHA1] = true
	}
	maxMS := s.cfg.Engine.Config().MaxTTL.Milliseconds()
	for _, args := range [][]string{
		{"SET", "k", "v", "NX", "PX", "100"},
		{"set", "k", "v", "px", "100", "nx"},
		{"SET", "k", "v", "NX", "PXAT", "99999999999999"},
		{"SET", "k", "v", "NX", "EX", "-1"},
		{"SETNX", "k", "v"},
		{"EVAL", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`, "1", "k", "v"},
		{"EVALSHA", "0123456789012345678901234567890123456789", "1", "k"},
		{"PEXPIRE", "k", "100"},
		{"GET", "k"}, {"PTTL", "k"}, {"DEL", "a", "b"}, {"EXISTS", "a"},
		{"INCR", "k"}, {"INCRBY", "k", "9223372036854775807"}, {"INCRBY", "k", "-1"}, {"DECRBY", "k", "1"},
		{"HELLO", "3", "AUTH", "default", "x", "SETNAME", "n"},
		{"CLIENT", "SETINFO", "lib-name", "x"}, {"CONFIG", "GET", "*"}, {"INFO", "quorum"},
		{"SCRIPT", "LOAD", "return 1"}, {"COMMAND", "DOCS"}, {"QUIT"},
	} {
		var a [6][]byte
		for i := range min(len(args), 6) {
			a[i] = []byte(args[i])
		}
		f.Add(uint8(len(args)), a[0], a[1], a[2], a[3], a[4], a[5])
	}
	f.Fuzz(func(t *testing.T, n uint8, a0, a1, a2, a3, a4, a5 []byte) {
		args := [][]byte{a0, a1, a2, a3, a4, a5}[:n%7]
		c := &client{authed: true, since: time.Now(), w: quorum.NewWaiter()}
		s.command(c, args)
		if len(args) == 0 {
			if len(c.slots) != 0 {
				t.Fatalf("an empty command got %d replies", len(c.slots))
			}
			return
		}
		if len(c.slots) != 1 {
			t.Fatalf("%q got %d replies, want 1", args, len(c.slots))
		}
		if r := c.slots[0].req; r != nil {
			if !understoodCommand(s, r.Command()) {
				checkMasterCommand(t, args, r.Command(), allowed, maxMS)
			}
		}
		s.cfg.Engine.Wait(c.w)
		out := s.render(nil, c, &c.slots[0])
		if _, n, err := resp.Parse3(out); err != nil || n != len(out) {
			t.Fatalf("%q: reply %q is not one RESP value (%d of %d bytes, %v)", args, out, n, len(out), err)
		}
	})
}

// understoodCommand reports whether cmd is an EVALSHA of a script the
// analyzer understood (what it does was checked then).
func understoodCommand(s *Server, cmd []byte) bool {
	p, _, err := resp.Parse(cmd)
	if err != nil || p.Type != resp.Array || len(p.Elems) < 2 || !strings.EqualFold(string(p.Elems[0].Str), "EVALSHA") {
		return false
	}
	sc, err, known := s.understood.Lookup(string(p.Elems[1].Str))
	return known && err == nil && sc != nil
}

// checkMasterCommand fails t unless cmd is an operation lockproxy means to
// send to a master.
func checkMasterCommand(t *testing.T, client [][]byte, cmd []byte, allowed map[string]bool, maxMS int64) {
	t.Helper()
	parsed, n, err := resp.Parse(cmd)
	if err != nil || n != len(cmd) || parsed.Type != resp.Array || len(parsed.Elems) == 0 {
		t.Fatalf("%q: malformed master command %q: %v", client, cmd, err)
	}
	a := make([][]byte, len(parsed.Elems))
	for i, e := range parsed.Elems {
		if e.Type != resp.Bulk {
			t.Fatalf("%q: master command %q has a %c argument", client, cmd, e.Type)
		}
		a[i] = e.Str
	}
	ms := func(b []byte) bool {
		v, err := strconv.ParseInt(string(b), 10, 64)
		return err == nil && v > 0 && v <= maxMS
	}
	switch strings.ToUpper(string(a[0])) {
	case "SET":
		if len(a) == 6 && string(a[3]) == "NX" && string(a[4]) == "PX" && ms(a[5]) {
			return
		}
	case "GET":
		if len(a) == 2 {
			return
		}
	case "PEXPIRE":
		if len(a) == 3 && ms(a[2]) {
			return
		}
	case "EVALSHA":
		if len(a) >= 3 && allowed[string(a[1])] {
			return
		}
	}
	t.Fatalf("client command %q sends %q to the masters", client, a)
}
