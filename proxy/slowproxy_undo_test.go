package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestStaleUndoSparesARetryThroughAnotherProxy: two lockproxies share 3
// masters behind a load balancer; P1's link to the masters turns slow
// (its writes take 1s to arrive: a congested path, or P1 itself stalled
// for as long). A client tries SET k T NX PX 300 through P1 and gets
// NOQUORUM; it retries with the same token, as redsync does after any
// error (and redis-py's Lock after a refusal), through P2 once T's first
// copies have expired, and is granted k for 5s. P1's undo of the first
// attempt, sent when the masters' late OKs reached it, arrives after the
// retry: unguarded, it deleted the granted copies on every master and a
// stranger was granted k inside the retry's validity. An undo sent that
// long after its acquisition (more than half its TTL, or past TTL minus
// node_timeout) is left out: the copy it meant to delete may have
// expired and been written again.
func TestStaleUndoSparesARetryThroughAnotherProxy(t *testing.T) {
	p1, p2, _, links := delayedPair(t, 0)
	ctx := context.Background()
	a1, a2, c := p1.client(), p2.client(), p2.client()

	for _, l := range links {
		l.setDelay(time.Second)
	}
	_, err := a1.SetNX(ctx, "k", "tokT", 300*time.Millisecond).Result()
	if err == nil {
		t.Fatalf("first attempt through P1 (writes delayed 1s, node_timeout 250ms) answered without error; want NOQUORUM")
	}
	t.Logf("first attempt through P1: %v", err)
	// The first attempt lands on every master about 1s after it was sent,
	// and its copies expire 300ms later.
	waitFor(t, func() bool { return count(p2.onMasters("k"), "tokT") == 3 }, "the first attempt's copies on every master")
	waitFor(t, func() bool { return count(p2.onMasters("k"), "(nil)") == 3 }, "the first attempt's copies expired")

	ok, err := a2.SetNX(ctx, "k", "tokT", 5*time.Second).Result()
	tGrant := time.Now()
	if err != nil || !ok {
		t.Fatalf("the retry through P2 with the same token: %v %v, want granted (k is free)", ok, err)
	}
	until := tGrant.Add(5*time.Second - quorum.Drift(5*time.Second, 0.01))
	// P1's undos, written when the late replies came, reach the masters
	// about 1s later; then its link is fast again, and its queues drain.
	time.Sleep(1200 * time.Millisecond)
	for _, l := range links {
		l.setDelay(0)
	}
	waitFor(t, func() bool {
		for _, m := range p1.engine.Masters() {
			if m.Queued+m.Inflight > 0 {
				return false
			}
		}
		return true
	}, "P1's queues drained")
	got := p2.onMasters("k")
	ok, err = c.SetNX(ctx, "k", "tokC", 5*time.Second).Result()
	if ok && time.Now().Before(until) {
		t.Fatalf("DOUBLE GRANT: a stranger got k %v before the end of the retry's validity; the masters held %v after P1's late undo",
			time.Until(until).Round(time.Millisecond), got)
	}
	if err != nil {
		t.Fatalf("stranger's SET NX: %v", err)
	}
	if count(got, "tokT") != 3 {
		t.Fatalf("the retry's copies after P1's traffic: %v, want tokT on every master", got)
	}
}
