package quorum

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
)

// manyKeyScript is an acquisition over every one of n KEYS (node-redlock's
// shape), its token in ARGV[1].
func manyKeyScript(n int) (*ScriptOp, [][]byte, [][]byte) {
	op := &ScriptOp{SHA1: "0123456789012345678901234567890123456789", Preloaded: true,
		Kind: Acquire, Yes: YesOne, Token: Arg{Index: 1}, EachKey: true, Undo: UndoDelIfValue}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "lock:%d", i)
	}
	return op, keys, [][]byte{[]byte("tok"), []byte("10000")}
}

// TestScriptNamesEveryKeyOfAManyKeyScript: a script over many keys finds
// each key and the token in its encoded command by splitting it once
// (splitCommand), with the same arguments argIn finds one at a time.
func TestScriptNamesEveryKeyOfAManyKeyScript(t *testing.T) {
	e := fakeEngine(3)
	defer e.timers.close()
	for _, n := range []int{1, 6, 7, 500} {
		op, keys, argv := manyKeyScript(n)
		r := e.Script(op, keys, argv, 10*time.Second, batching.Now())
		if string(r.token) != "tok" || len(r.undoKeys) != n {
			t.Fatalf("%d keys: token %q, %d undo keys", n, r.token, len(r.undoKeys))
		}
		for i, k := range r.undoKeys {
			if string(k) != string(keys[i]) {
				t.Fatalf("%d keys: undo key %d is %q, want %q", n, i, k, keys[i])
			}
		}
		split := splitCommand(r.cmd)
		for i := range split {
			if got := argIn(r.cmd, i); string(got) != string(split[i]) {
				t.Fatalf("argument %d: split %q, argIn %q", i, split[i], got)
			}
		}
	}
}

// BenchmarkScriptManyKeys is the engine's cost of building a request for a
// script over 1,024 keys (the most a client may name): linear in the keys.
func BenchmarkScriptManyKeys(b *testing.B) {
	e := fakeEngine(3)
	defer e.timers.close()
	op, keys, argv := manyKeyScript(1024)
	for b.Loop() {
		e.Script(op, keys, argv, 10*time.Second, batching.Now())
	}
}

// TestTimedOpsCountTheTTLTheySend: a TTL with a fraction of a millisecond
// (PXAT or EXAT, converted to a duration) is sent in whole milliseconds,
// and validity must be counted from what was sent, not from the fraction
// more (found by review).
func TestTimedOpsCountTheTTLTheySend(t *testing.T) {
	e := fakeEngine(3)
	const ttl = 2*time.Second + 700*time.Microsecond
	for name, r := range map[string]*Request{
		"Acquire":    e.Acquire([]byte("k"), []byte("tok"), ttl, 0),
		"Extend":     e.Extend([]byte("k"), ttl, 0),
		"ExtendHeld": e.ExtendHeld([]byte("k"), []byte("tok"), ttl, 0),
	} {
		if r.TTL != 2*time.Second {
			t.Errorf("%s: TTL %v, want 2s (the 2000 ms sent)", name, r.TTL)
		}
		if !bytes.Contains(r.cmd, []byte("\r\n2000\r\n")) {
			t.Errorf("%s sends %q, want 2000 ms", name, r.cmd)
		}
	}
}
