package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Fuzz tests of what a client can send: the byte stream through the RESP
// guard and redcon's reader, and one command through the whole command
// path (parse, quorum request, reply).
//
//	go test -run XXX -fuzz FuzzCommandStream -fuzztime 60s ./proxy/
//	go test -run XXX -fuzz 'FuzzCommand$' -fuzztime 60s ./proxy/

// chunkReader returns data k bytes at a time, then io.EOF.
type chunkReader struct {
	data []byte
	k    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.k)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// guardAll runs data through a respGuard, arriving k bytes at a time and
// read into buffers of size p, and returns what it handed on and why it
// stopped.
func guardAll(cfg Config, data []byte, k, p int) ([]byte, error) {
	var g respGuard
	g.init(cfg)
	rd := &chunkReader{data: data, k: k}
	var out []byte
	buf := make([]byte, p)
	for {
		n, err := g.read(rd, buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, errors.New("read returned 0, nil")
		}
	}
}

// FuzzCommandStream: whatever a client sends, the guard hands on a prefix
// of it made of whole commands within the limits, the same however the
// bytes arrive, and redcon's reader parses that prefix without panicking,
// spinning or leaving half a command.
func FuzzCommandStream(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nPING\r\n",
		"*1\r\n$9223372036854775807\r\nx",
		"*4611686018427387904\r\n",
		"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
		"*-1\r\n", "*0\r\n", "$3\r\nabc\r\n", "SET \"a b\" 'c'\r\n", "\r\n\r\n", "*1\r\n+OK\r\n",
		"*1\r\n$3\r\nabcd\r\n", "*9\r\n", "*2\r\n$65\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	cfg := Config{MaxBulkLen: 64, MaxArgs: 8, MaxQueryBuffer: 512}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, errWhole := guardAll(cfg, data, len(data)+1, 4096)
		bits, errBits := guardAll(cfg, data, int(chunk%13)+1, int(chunk%7)+1)
		if !bytes.Equal(whole, bits) || fmt.Sprint(errWhole) != fmt.Sprint(errBits) {
			t.Fatalf("depends on how bytes arrive: %q (%v) vs %q (%v)", whole, errWhole, bits, errBits)
		}
		if !bytes.HasPrefix(data, whole) {
			t.Fatalf("handed on %q, not a prefix of the input", whole)
		}
		var pe *ProtocolError
		if !errors.Is(errWhole, io.EOF) && !errors.As(errWhole, &pe) {
			t.Fatalf("stopped with %v", errWhole)
		}
		rd := redcon.NewReader(bytes.NewReader(whole))
		for {
			cmds, err := rd.ReadCommands()
			for _, c := range cmds {
				if len(c.Args) > cfg.MaxArgs {
					t.Fatalf("redcon got %d arguments, limit %d", len(c.Args), cfg.MaxArgs)
				}
				for _, a := range c.Args {
					if len(a) > max(cfg.MaxBulkLen, inlineMax) {
						t.Fatalf("redcon got a %d-byte argument", len(a))
					}
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				// The only check the guard leaves to redcon: inline quoting.
				if !strings.Contains(err.Error(), "unbalanced quotes") {
					t.Fatalf("redcon: %v on %q", err, whole)
				}
				break
			}
		}
	})
}

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
	cat, err := NewCatalog(nil)
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
		if n, err := respLen(out); err != nil || n != len(out) {
			t.Fatalf("%q: reply %q is not one RESP value (%d of %d bytes, %v)", args, out, n, len(out), err)
		}
	})
}

// understoodCommand reports whether cmd is an EVALSHA of a script the
// analyzer understood (what it does was checked then).
func understoodCommand(s *Server, cmd []byte) bool {
	p, err := redcon.Parse(cmd)
	if err != nil || len(p.Args) < 2 || !strings.EqualFold(string(p.Args[0]), "EVALSHA") {
		return false
	}
	sc, err, known := s.understood.lookup(string(p.Args[1]))
	return known && err == nil && sc != nil
}

// checkMasterCommand fails t unless cmd is an operation lockproxy means to
// send to a master.
func checkMasterCommand(t *testing.T, client [][]byte, cmd []byte, allowed map[string]bool, maxMS int64) {
	t.Helper()
	parsed, err := redcon.Parse(cmd)
	if err != nil {
		t.Fatalf("%q: malformed master command %q: %v", client, cmd, err)
	}
	a := parsed.Args
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

// respLen is the length of the RESP2/RESP3 value at the start of b.
func respLen(b []byte) (int, error) {
	line := func() (string, int, error) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 1 {
			return "", 0, errors.New("no line")
		}
		return string(b[1:i]), i + 2, nil
	}
	if len(b) == 0 {
		return 0, errors.New("empty")
	}
	l, n, err := line()
	if err != nil {
		return 0, err
	}
	switch b[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return n, nil
	case '$', '=', '!':
		size, err := strconv.Atoi(l)
		if err != nil || size < -1 {
			return 0, errors.New("bad length")
		}
		if size == -1 {
			return n, nil
		}
		if len(b) < n+size+2 || string(b[n+size:n+size+2]) != "\r\n" {
			return 0, errors.New("short bulk")
		}
		return n + size + 2, nil
	case '*', '%', '~', '>':
		count, err := strconv.Atoi(l)
		if err != nil || count < -1 {
			return 0, errors.New("bad count")
		}
		if b[0] == '%' {
			count *= 2
		}
		for i := 0; i < count; i++ {
			m, err := respLen(b[n:])
			if err != nil {
				return 0, err
			}
			n += m
		}
		return n, nil
	}
	return 0, errors.New("unknown type " + strconv.Quote(string(b[:1])))
}
