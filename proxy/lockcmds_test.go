package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/batching"
)

// TestAppendSetNX: the hand-encoded SET NX PX is byte for byte what
// AppendCommand encodes, and the key and token it returns are the
// command's own bytes.
func TestAppendSetNX(t *testing.T) {
	for _, c := range []struct {
		key, token string
		ms         int64
	}{
		{"lock:1", "tok", 10000},
		{"k", "", 1},
		{"", "t", 9223372036854},
		{strings.Repeat("x", 1000), "tok\r\n$3\r\n", 60000},
	} {
		prefix := []byte("already there")
		got, k, tok := appendSetNX(prefix, []byte(c.key), []byte(c.token), c.ms)
		want := batching.AppendCommand([]byte("already there"), []byte("SET"), []byte(c.key), []byte(c.token), []byte("NX"), []byte("PX"),
			[]byte(strconv.FormatInt(c.ms, 10)))
		if !bytes.Equal(got, want) {
			t.Errorf("%q %q %d:\n got %q\nwant %q", c.key, c.token, c.ms, got, want)
		}
		if string(k) != c.key || string(tok) != c.token || cap(k) != len(k) || cap(tok) != len(tok) {
			t.Errorf("%q %q: key %q token %q (caps %d %d)", c.key, c.token, k, tok, cap(k), cap(tok))
		}
		if len(k) > 0 && &k[0] != &got[bytes.Index(got, []byte(c.key))] {
			t.Errorf("%q: the key is not a slice of the command", c.key)
		}
	}
}

// TestScriptTableGetSHA: a client's sha1 is found in any case, short or
// over-long, as SCRIPT EXISTS and EVALSHA find it on Redis.
func TestScriptTableGetSHA(t *testing.T) {
	tab := &scriptTable{m: map[string]*Script{}}
	sc := &Script{Name: "x"}
	sha := strings.Repeat("ab12", 10)
	tab.add(sha, sc)
	for _, q := range []string{sha, strings.ToUpper(sha), "AB12" + sha[4:]} {
		if tab.getSHA([]byte(q)) != sc {
			t.Errorf("getSHA(%q) missed", q)
		}
	}
	long := strings.Repeat("A", 100)
	tab.add(strings.ToLower(long), sc)
	if tab.getSHA([]byte(long)) != sc || tab.getSHA([]byte("00")) != nil {
		t.Error("getSHA of a long or unknown sha1")
	}
}
