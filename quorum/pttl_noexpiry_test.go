package quorum_test

import (
	"testing"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestPTTLCopyWithoutExpiry: a key's copy without an expiry (PTTL -1,
// written to a master by something other than lockproxy) outlasts any
// other copy, so it counts as the longest. The Q-th largest PTTL of a
// master holding it for ever and one holding it 5s is 5s: the quorum holds
// it that long, not for ever. Sorted as the smallest, -1 came out as the
// Q-th value and the answer said the lock never expires (found by review).
func TestPTTLCopyWithoutExpiry(t *testing.T) {
	ms := redisproc.ForTest(t, 3)
	e := startEngine(t, ms, bootstrap)
	poll(t, "every master voting", func() bool { return allVoting(e) })
	if _, err := ms[0].Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := ms[1].Do("SET", "k", "v", "PX", "5000"); err != nil {
		t.Fatal(err)
	}
	r := decideNow(e, e.PTTL([]byte("k"), batching.Now()))
	rep, err := r.Result()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Int <= 0 || rep.Int > 5000 {
		t.Errorf("PTTL = %d; want the 5s copy's remaining time, at most 5000 (a quorum holds k that long, one master for ever)", rep.Int)
	}
	// Both without expiry: then a quorum holds it for ever.
	if _, err := ms[1].Do("PERSIST", "k"); err != nil {
		t.Fatal(err)
	}
	r = decideNow(e, e.PTTL([]byte("k"), batching.Now()))
	if rep, _ := r.Result(); rep.Int != -1 {
		t.Errorf("PTTL with two copies without expiry = %d, want -1", rep.Int)
	}
}
