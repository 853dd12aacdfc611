package quorum

import (
	"testing"
	"unsafe"
)

// TestRequestLayout: everything a master's reply reads of a request
// without check or re-entrant counts shares its first 64-byte line (see
// the Request comment). A field added in the wrong place fails here, not
// in a benchmark.
func TestRequestLayout(t *testing.T) {
	var r Request
	for name, f := range map[string][2]uintptr{
		"mu": {unsafe.Offsetof(r.mu), unsafe.Sizeof(r.mu)}, "e": {unsafe.Offsetof(r.e), unsafe.Sizeof(r.e)},
		"refs": {unsafe.Offsetof(r.refs), unsafe.Sizeof(r.refs)}, "answered": {unsafe.Offsetof(r.answered), unsafe.Sizeof(r.answered)},
		"failed": {unsafe.Offsetof(r.failed), unsafe.Sizeof(r.failed)}, "yes": {unsafe.Offsetof(r.yes), unsafe.Sizeof(r.yes)},
		"state": {unsafe.Offsetof(r.state), unsafe.Sizeof(r.state)}, "rk": {unsafe.Offsetof(r.rk), unsafe.Sizeof(r.rk)},
		"supLeft": {unsafe.Offsetof(r.supLeft), unsafe.Sizeof(r.supLeft)}, "inDispatch": {unsafe.Offsetof(r.inDispatch), 1},
		"decidedIn": {unsafe.Offsetof(r.decidedIn), 1}, "undoing": {unsafe.Offsetof(r.undoing), 1},
		"retrying": {unsafe.Offsetof(r.retrying), 1}, "kind": {unsafe.Offsetof(r.kind), 1}, "agg": {unsafe.Offsetof(r.agg), 1},
		"bigHeld": {unsafe.Offsetof(r.bigHeld), 1}, "fast": {unsafe.Offsetof(r.fast), 1},
		"nilIsNoop": {unsafe.Offsetof(r.nilIsNoop), 1}, "noIsNoop": {unsafe.Offsetof(r.noIsNoop), 1},
		"shortenOn": {unsafe.Offsetof(r.shortenOn), 1},
	} {
		if f[0]+f[1] > 64 {
			t.Errorf("%s is at bytes %d-%d, outside the first line (0-64)", name, f[0], f[0]+f[1])
		}
	}
	// The outcome and what its decision and publication touch: three
	// lines, the first starting with reply.
	start := unsafe.Offsetof(r.reply)
	if start%64 != 0 {
		t.Errorf("reply starts at byte %d, not at a cache line", start)
	}
	if end := unsafe.Offsetof(r.sup) + unsafe.Sizeof(r.sup); end > start+3*64 {
		t.Errorf("the outcome's fields span bytes %d-%d, more than three lines", start, end)
	}
	// The masters' replies live outside the request unless they are
	// uncommon (replies.go), and so does what only uncommon requests set
	// (cold.go): a request small enough that the pool's zeroing and the
	// cache's share of hundreds in flight stay low, in the 512-byte size
	// class (8 lines).
	if sz := unsafe.Sizeof(r); sz > 512 {
		t.Errorf("a Request is %d bytes, want at most 512", sz)
	}
}
