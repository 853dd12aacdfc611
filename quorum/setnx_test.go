package quorum

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
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
		want := resp.AppendCommand([]byte("already there"), []byte("SET"), []byte(c.key), []byte(c.token), []byte("NX"), []byte("PX"),
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
