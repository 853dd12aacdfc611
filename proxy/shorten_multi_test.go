package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// TestShortenNeverCutsAMultiKeyGrant: a granted extend over several lock
// keys (node-redlock) that keeps k's longer TTL must still move k's
// expiry: it left it exactly where P1's earlier single-key extend had,
// and P1's shorter TTL, landing late, cut the copy the multi-key grant
// counted (review, helper-63). Every lock key the token holds is bumped.
func TestShortenNeverCutsAMultiKeyGrant(t *testing.T) {
	const delay = 100 * time.Millisecond
	p1, p2, masters := shortenPair(t, delay)
	ctx := context.Background()
	a1, a2, b := p1.client(), p2.client(), p2.client()
	acq := corpusScript(t, "node-redlock-v5_acquire")
	ext := corpusScript(t, "node-redlock-v5_extend")

	r, err := acq.Run(ctx, a2, []string{"k", "k2"}, "tokA", 60000).Result()
	t.Logf("A acquire [k k2] 60s via P2: %v %v; PEXPIRETIME k %v", r, err, pexpiretimes(masters, "k"))
	if fmt.Sprint(r) != "2" {
		t.Fatal("acquire not granted")
	}
	r, err = ext.Run(ctx, a1, []string{"k"}, "tokA", 1500).Result()
	t.Logf("A extend [k] to 1.5s via P1 (slow): %v %v; PEXPIRETIME k %v", r, err, pexpiretimes(masters, "k"))
	if fmt.Sprint(r) != "1" {
		t.Fatal("extend via P1 not granted")
	}
	tA := time.Now()
	r, err = ext.Run(ctx, a2, []string{"k", "k2"}, "tokA", 30000).Result()
	t.Logf("A extend [k k2] to 30s via P2: %v %v; PEXPIRETIME k %v", r, err, pexpiretimes(masters, "k"))
	if fmt.Sprint(r) != "2" {
		t.Fatal("multi-key extend via P2 not granted")
	}
	untilA := tA.Add(30*time.Second - quorum.Drift(30*time.Second, 0.01))
	time.Sleep(2 * delay)
	t.Logf("after P1's shorten landed: PTTL k %v, k2 %v; PEXPIRETIME k %v", p2.pttls("k"), p2.pttls("k2"), pexpiretimes(masters, "k"))
	time.Sleep(1500 * time.Millisecond)
	ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result()
	t.Logf("B SET k NX PX 10000 via P2: %v %v; PTTLs %v", ok, err, p2.pttls("k"))
	if ok && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted k %v before the end of A's validity (A's extend of [k k2] to 30s via P2 was granted)", time.Until(untilA).Round(time.Millisecond))
	}
}

// TestFencedReentryKeepsTheLock: Redisson's RFencedLock tryLock is a
// fenced acquire, which is not checked; a re-entry with a shorter lease,
// granted or failed, PEXPIREd the holder's lock lower on every master,
// and B was granted it inside the first grant's validity (review,
// helper-63). Fenced acquires now run wrapped by WrapNoShorten.
func TestFencedReentryKeepsTheLock(t *testing.T) {
	for _, v := range []string{"granted", "failed"} {
		t.Run(v, func(t *testing.T) { fencedReentry(t, v) })
	}
}

func fencedReentry(t *testing.T, v string) {
	c := startClusterWith(t, 3, false)
	ctx := context.Background()
	a, b := c.client(), c.client()
	s := redis.NewScript(redissonFencedTryLock)
	keys := []string{"fk", "redisson_lock_token:{fk}"}
	r, err := s.Run(ctx, a, keys, 30000, "A:1").Result()
	tA := time.Now()
	untilA := tA.Add(30*time.Second - quorum.Drift(30*time.Second, 0.01))
	t.Logf("A fenced tryLock 30s: %v %v; PTTLs %v", r, err, c.pttls("fk"))
	if v == "failed" {
		// the re-entry reaches only one master before NOQUORUM: pause two
		c.masters[1].Pause()
		c.masters[2].Pause()
	}
	r, err = s.Run(ctx, a, keys, 1000, "A:1").Result()
	if v == "failed" {
		c.masters[1].Resume()
		c.masters[2].Resume()
	}
	t.Logf("A fenced re-entry 1s: %v %v; PTTLs %v", r, err, c.pttls("fk"))
	time.Sleep(1500 * time.Millisecond)
	r, err = s.Run(ctx, b, keys, 10000, "B:1").Result()
	t.Logf("B fenced tryLock: %v %v; PTTLs %v", r, err, c.pttls("fk"))
	if rs, ok := r.([]any); ok && len(rs) == 2 && fmt.Sprint(rs[0]) == "-1" && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted fk %v before the end of A's first grant (30s)", time.Until(untilA).Round(time.Millisecond))
	}
}
