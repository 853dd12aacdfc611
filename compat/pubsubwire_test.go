package compat

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The wire side of the lock libraries' pub/sub flows (lockpubsub_test.go):
// a raw connection that can sit in subscribed mode, the exact frames Redis
// sends there, and the libraries' scripts read from the corpus.

// corpusDir is the lock clients' script corpus (../shared/clients/scripts)
// as the repository keeps it for the analyzer's tests; MANIFEST.json gives
// each script's sha1.
var corpusDir = filepath.Join("..", "proxy", "analyze", "testdata", "corpus")

// corpusScript returns the body of the corpus script name (the file name
// without .lua), checked against the manifest's sha1: the flows must send
// what the libraries send, byte for byte.
func corpusScript(t *testing.T, name string) string {
	t.Helper()
	return manifestScript(t, corpusDir, name)
}

// manifestScript returns the body of script name in dir, checked against
// dir's MANIFEST.json sha1.
func manifestScript(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".lua"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(dir, "MANIFEST.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]struct{ SHA1 string }
	if err := json.Unmarshal(m, &manifest); err != nil {
		t.Fatalf("MANIFEST.json: %v", err)
	}
	if got := sha1Of(string(b)); got != manifest[name].SHA1 {
		t.Fatalf("%s.lua has sha1 %s, the manifest says %q", name, got, manifest[name].SHA1)
	}
	return string(b)
}

// send writes one command without waiting for its reply.
func (rc *rawConn) send(args ...string) {
	rc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	rc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		rc.t.Fatal(err)
	}
}

// errNoFrame: nothing arrived within the wait.
var errNoFrame = errors.New("no frame")

// read returns the next whole frame, or errNoFrame when none starts within
// wait. A frame cut by the deadline would desynchronize the connection;
// frames here are a few dozen bytes and come in one write.
func (rc *rawConn) read(wait time.Duration) (string, error) {
	rc.c.SetReadDeadline(time.Now().Add(wait))
	f, err := readRaw(rc.r)
	if err != nil && f == "" && isTimeout(err) {
		return "", errNoFrame
	}
	return f, err
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// expect reads the next frame and fails t unless it is want.
func (rc *rawConn) expect(wait time.Duration, want, what string) {
	rc.t.Helper()
	got, err := rc.read(wait)
	if err != nil || got != want {
		rc.t.Fatalf("%s: got %q (%v), want %q", what, got, err, want)
	}
}

// none fails t when a frame arrives within wait: a duplicate message.
func (rc *rawConn) none(wait time.Duration, what string) {
	rc.t.Helper()
	if got, err := rc.read(wait); !errors.Is(err, errNoFrame) {
		rc.t.Fatalf("%s: got %q (%v) within %v, want nothing", what, got, err, wait)
	}
}

// evalsha runs a script as Spring Data Redis (and redis-py, ioredis…)
// does: EVALSHA, then EVAL when the server answers NOSCRIPT.
func (rc *rawConn) evalsha(body string, keys []string, args ...string) string {
	rc.t.Helper()
	tail := append(append([]string{fmt.Sprint(len(keys))}, keys...), args...)
	if r := rc.do(append([]string{"EVALSHA", sha1Of(body)}, tail...)...); !strings.HasPrefix(r, "-NOSCRIPT") {
		return r
	}
	return rc.do(append([]string{"EVAL", body}, tail...)...)
}

// eval runs a script with EVAL, as Redisson does by default.
func (rc *rawConn) eval(body string, keys []string, args ...string) string {
	rc.t.Helper()
	return rc.do(append(append([]string{"EVAL", body, fmt.Sprint(len(keys))}, keys...), args...)...)
}

// frame is a RESP2 array (or, with resp3, a RESP3 push) of bulk strings;
// an element ":n" is an integer.
func frame(resp3 bool, elems ...string) string {
	var b strings.Builder
	head := "*"
	if resp3 {
		head = ">"
	}
	fmt.Fprintf(&b, "%s%d\r\n", head, len(elems))
	for _, e := range elems {
		if strings.HasPrefix(e, ":") {
			b.WriteString(e + "\r\n")
			continue
		}
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(e), e)
	}
	return b.String()
}

// subscriber dials addr (RESP3 after HELLO 3 when resp3) and subscribes
// with cmd (SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE) to name, as a library's
// pub/sub connection does: confirmed once the reply arrives.
func subscriber(t *testing.T, addr string, resp3 bool, cmd, name string) *rawConn {
	t.Helper()
	rc := dialRaw(t, addr)
	if resp3 {
		if r := rc.do("HELLO", "3"); !strings.HasPrefix(r, "%") {
			t.Fatalf("HELLO 3 = %q", r)
		}
	}
	rc.send(cmd, name)
	rc.expect(5*time.Second, frame(resp3, strings.ToLower(cmd), name, ":1"), cmd+" "+name)
	return rc
}

// randomUUID is a version 4 UUID as Java's UUID.randomUUID().toString()
// writes it: Redisson's and Spring's client ids.
func randomUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// randomHex is n random bytes in hex: Redisson's request ids
// (ServiceManager.generateId, 16 bytes).
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
