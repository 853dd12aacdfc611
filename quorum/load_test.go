package quorum

import (
	"fmt"
	"testing"
)

// Masters loaded the same understood scripts are flushed one at a time,
// bound/n scripts apart, and none holds more than the bound: a flush
// costs another lockproxy's EVALSHA that meets it one master's vote, never
// a quorum's.
func TestScriptLoadsFlushStaggered(t *testing.T) {
	const n, bound, scripts = 5, 20, 200
	var l scriptLoads
	l.init(n, bound)
	held := make([]int, n)
	flushedAt := map[int]int{} // script → master flushed before it
	for s := range scripts {
		op := &ScriptOp{SHA1: fmt.Sprint(s), Body: "return 1"}
		for i := range n {
			err := l.load(i, op, func() error {
				if m, ok := flushedAt[s]; ok {
					t.Errorf("masters %d and %d both flushed before script %d", m, i, s)
				}
				flushedAt[s], held[i] = i, 0
				return nil
			}, func([]byte) error { held[i]++; return nil }, func() error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if held[i] > bound {
				t.Fatalf("master %d holds %d understood scripts, over the bound %d", i, held[i], bound)
			}
			// Loaded again in the same epoch: nothing queued.
			l.load(i, op, func() error { t.Fatal("flushed for a loaded script"); return nil },
				func([]byte) error { t.Fatalf("script %d loaded twice on master %d", s, i); return nil }, func() error { return nil })
		}
	}
	if got := l.flushes.Load(); got < n*(scripts/bound-1) {
		t.Errorf("%d flushes for %d scripts on %d masters with a bound of %d", got, scripts, n, bound)
	}
}
