package quorum

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestAppendEvalSHA: the direct encoding is byte for byte the generic one,
// for no keys, several keys and arguments, empty and binary values.
func TestAppendEvalSHA(t *testing.T) {
	sha := undoScript.SHA1
	for _, c := range []struct{ keys, args [][]byte }{
		{nil, nil},
		{[][]byte{[]byte("lock:1")}, [][]byte{[]byte("tok")}},
		{[][]byte{[]byte("a"), []byte(""), []byte(strings.Repeat("k", 300))}, [][]byte{[]byte("\r\n$1\r\n"), []byte("60000")}},
	} {
		all := [][]byte{[]byte("EVALSHA"), []byte(sha), []byte(strconv.Itoa(len(c.keys)))}
		all = append(append(all, c.keys...), c.args...)
		want := resp.AppendCommand([]byte("prefix"), all...)
		if got := AppendEvalSHA([]byte("prefix"), sha, c.keys, c.args); !bytes.Equal(got, want) {
			t.Errorf("keys %q args %q:\n got %q\nwant %q", c.keys, c.args, got, want)
		}
	}
}
