package quorum_test

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestQueuedOwnPTTLAgedFromSubmit: lockproxy's own PTTL (learnExpiry
// submits PTTL(key, 0)) queued behind another request on its key must get
// its t0 at Submit, before the key table queues it: with t0 still 0 when it
// ran, qthTTL aged the reading by the process's uptime and answered 0, and
// the keyspace expired notification was never scheduled (found by a
// review).
func TestQueuedOwnPTTLAgedFromSubmit(t *testing.T) {
	ms := redisproc.ForTest(t, 3)
	e := startEngine(t, ms, bootstrap, func(cfg *quorum.Config) { cfg.NodeTimeout = 500 * time.Millisecond })
	poll(t, "every master voting", func() bool { return allVoting(e) })
	if up := time.Duration(batching.Now()); up < 2*time.Second {
		time.Sleep(2*time.Second - up) // an uptime longer than any slack below
	}
	if r := decideNow(e, e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now())); r.Outcome() != quorum.Granted {
		t.Fatalf("not granted: %v", r.Outcome())
	}
	// Keep k busy: a client's PTTL in flight while every master is paused.
	for _, m := range ms {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	first := e.PTTL([]byte("k"), batching.Now())
	w1 := quorum.NewWaiter()
	e.Submit(w1, first)
	own := e.PTTL([]byte("k"), 0) // as proxy/pubsubcmds.go learnExpiry
	w2 := quorum.NewWaiter()
	e.Submit(w2, own)
	time.Sleep(30 * time.Millisecond)
	for _, m := range ms {
		m.Resume()
	}
	e.Wait(w1)
	e.Wait(w2)
	r1, err1 := first.Result()
	r2, err2 := own.Result()
	t.Logf("client's PTTL %d (%v), queued own PTTL %d (%v), uptime %v", r1.Int, err1, r2.Int, err2, time.Duration(batching.Now()))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if r2.Int < r1.Int-200 {
		t.Errorf("queued own PTTL answered %dms, the client's just before %dms: aged by the process uptime", r2.Int, r1.Int)
	}
}
