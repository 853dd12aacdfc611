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

// TestAppendEvalSHAOneAllocation: the encoded command is sized before it is
// written (it is built on the reply path for every failed acquisition).
func TestAppendEvalSHAOneAllocation(t *testing.T) {
	keys := [][]byte{[]byte("lock:" + strings.Repeat("k", 100))}
	token := []byte(strings.Repeat("t", 36))
	args := [][]byte{token}
	// One allocation; the race detector's instrumentation (make test)
	// adds one. Growing from nil took six.
	if n := testing.AllocsPerRun(100, func() { AppendEvalSHA(nil, undoScript.SHA1, keys, args) }); n > 2 {
		t.Fatalf("AppendEvalSHA allocated %v times, want 1 (2 under -race)", n)
	}
	got := UndoCommand(keys, token)
	want := resp.AppendCommandString(nil, "EVALSHA", undoScript.SHA1, "1", string(keys[0]), string(token))
	if !bytes.Equal(got, want) {
		t.Fatalf("UndoCommand = %q, want %q", got, want)
	}
}
