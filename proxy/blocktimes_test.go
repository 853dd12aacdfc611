package proxy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBlockTimes: the blockers with a timeout come out by deadline, only
// once due; one answered early (unblock) leaves at once, so that a client
// served long before its timeout holds nothing here; one without a timeout
// never goes in.
func TestBlockTimes(t *testing.T) {
	const never = int64(1) << 62
	var h blockTimes
	var all []*blocker
	for i := 0; i < 5000; i++ {
		b := &blocker{deadline: 1 + rand.Int64N(100000)}
		all = append(all, b)
		h.add(b)
		h.add(b) // a second add of the same blocker changes nothing
	}
	h.add(&blocker{}) // no timeout
	if len(h) != len(all) {
		t.Fatalf("%d blockers in, want %d", len(h), len(all))
	}
	served := map[*blocker]bool{}
	for i, b := range all {
		if i%3 == 0 {
			h.remove(b)
			served[b] = true
		}
	}
	if want := len(all) - len(served); len(h) != want {
		t.Fatalf("%d blockers in after serving %d, want %d", len(h), len(served), want)
	}
	var got []int64
	for now := int64(0); now < 100000+997; now += 997 {
		for {
			b, next := h.due(now, never)
			if b == nil {
				if len(h) > 0 && (next <= now || next != h[0].deadline) {
					t.Fatalf("at %d the next deadline is %d, first in is %d", now, next, h[0].deadline)
				}
				break
			}
			if b.deadline > now || served[b] || b.hidx != 0 {
				t.Fatalf("at %d got a blocker due at %d (served %v, hidx %d)", now, b.deadline, served[b], b.hidx)
			}
			got = append(got, b.deadline)
		}
	}
	if len(got) != len(all)-len(served) || !slices.IsSorted(got) {
		t.Fatalf("%d blockers expired (sorted %v), want %d in deadline order", len(got), slices.IsSorted(got), len(all)-len(served))
	}
	if b, next := h.due(never-1, never); b != nil || next != never {
		t.Fatalf("an empty set answers %v, %d", b, next)
	}
}
