package quorum

import (
	"testing"
	"unsafe"
)

// TestRequestLayout: the vote's hot fields share the first 64-byte line,
// what else Complete reads the second, and each master's Reply has a line
// of its own (see the Request comment). A
// field added in the wrong place fails here, not in a benchmark.
func TestRequestLayout(t *testing.T) {
	var r Request
	if end := unsafe.Offsetof(r.yes) + unsafe.Sizeof(r.yes); end > 64 {
		t.Errorf("the vote's fields end at byte %d, past the first cache line", end)
	}
	// What Complete reads besides the vote: the second line.
	for name, f := range map[string][2]uintptr{
		"e": {unsafe.Offsetof(r.e), unsafe.Sizeof(r.e)}, "rule": {unsafe.Offsetof(r.rule), unsafe.Sizeof(r.rule)},
		"nkeys": {unsafe.Offsetof(r.nkeys), unsafe.Sizeof(r.nkeys)}, "sups": {unsafe.Offsetof(r.sups), unsafe.Sizeof(r.sups)},
		"refs": {unsafe.Offsetof(r.refs), unsafe.Sizeof(r.refs)}, "supLeft": {unsafe.Offsetof(r.supLeft), unsafe.Sizeof(r.supLeft)},
		"kind": {unsafe.Offsetof(r.kind), unsafe.Sizeof(r.kind)}, "agg": {unsafe.Offsetof(r.agg), unsafe.Sizeof(r.agg)},
	} {
		if f[0] < 64 || f[0]+f[1] > 128 {
			t.Errorf("%s is at bytes %d-%d, outside the second line (64-128)", name, f[0], f[0]+f[1])
		}
	}
	// The masters' replies live outside the request unless they are
	// uncommon (replies.go): a request small enough that the pool's
	// zeroing and the cache's share of hundreds in flight stay low.
	if sz := unsafe.Sizeof(r); sz > 1024 {
		t.Errorf("a Request is %d bytes, want at most 1024", sz)
	}
}
