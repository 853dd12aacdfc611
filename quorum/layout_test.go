package quorum

import (
	"testing"
	"unsafe"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestRequestLayout: the vote's hot fields share the first 64-byte line and
// each master's Reply has a line of its own (see the Request comment). A
// field added in the wrong place fails here, not in a benchmark.
func TestRequestLayout(t *testing.T) {
	var r Request
	if end := unsafe.Offsetof(r.yes) + unsafe.Sizeof(r.yes); end > 64 {
		t.Errorf("the vote's fields end at byte %d, past the first cache line", end)
	}
	if off := unsafe.Offsetof(r.replies); off != 64 {
		t.Errorf("replies start at byte %d, want 64", off)
	}
	if sz := unsafe.Sizeof(resp.Reply{}); sz != 64 {
		t.Errorf("a Reply is %d bytes, want 64 (one cache line)", sz)
	}
}
