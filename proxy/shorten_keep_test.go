package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// TestShortenNeverCutsAGrantThatKeptTheExpiry: the shorter TTL of P1's
// granted extend is a compare-and-set on the expiry that extend left. An
// acquire that re-takes the caller's own lock never lowers its TTL
// (WrapCheck keep), so the expiry stayed the very one P1's extend
// reported, P1's late shorten still matched and cut the re-acquisition
// granted since through P2 (review, helper-62). Every checked run that
// leaves the token moves the expiry, by 1 ms when nothing else did.
func TestShortenNeverCutsAGrantThatKeptTheExpiry(t *testing.T) {
	for _, v := range []string{"bsm-obtain", "redisson-reentry"} {
		t.Run(v, func(t *testing.T) { shortenKeep(t, v) })
	}
}

func shortenKeep(t *testing.T, v string) {
	// P1's third master is slower still: P1 decides on the first two.
	p1, p2, masters := shortenPair(t, 100*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond)
	pet := func() []string { return pexpiretimes(masters, "k") }
	ctx := context.Background()
	a1, a2, b := p1.client(), p2.client(), p2.client()
	obtain := corpusScript(t, "bsm-redislock-v0.9.4_obtain")
	try := corpusScript(t, "redisson-4.x_tryLockInner")
	renew := corpusScript(t, "redisson-3.40_renewExpiration")
	acquire := func(cl *redis.Client, ttl time.Duration) string {
		var r any
		var err error
		if v == "bsm-obtain" {
			r, err = obtain.Run(ctx, cl, []string{"k"}, "tokA", 4, ttl.Milliseconds()).Result()
		} else {
			r, err = try.Run(ctx, cl, []string{"k"}, ttl.Milliseconds(), "A:1").Result()
			if errors.Is(err, redis.Nil) {
				r, err = "granted", nil
			}
		}
		return fmt.Sprint(r, " ", err)
	}
	extend := func(cl *redis.Client, ttl time.Duration) string {
		var r any
		var err error
		if v == "bsm-obtain" {
			r, err = cl.SetXX(ctx, "k", "tokA", ttl).Result()
		} else {
			r, err = renew.Run(ctx, cl, []string{"k"}, ttl.Milliseconds(), "A:1").Result()
		}
		return fmt.Sprint(r, " ", err)
	}
	if r := acquire(a2, 60*time.Second); r != "OK <nil>" && r != "granted <nil>" {
		t.Fatalf("A acquire 60s: %s", r)
	}
	t.Logf("PEXPIRETIME after acquire: %v", pet())
	r1 := extend(a1, 1500*time.Millisecond) // P1: slow link; its shorten lands ~100ms after the grant
	tA := time.Now()
	pe1 := pet()
	r2 := acquire(a2, 30*time.Second) // P2: A re-takes its own lock for 30s
	t.Logf("PEXPIRETIME after P1's extend: %v, after P2's re-acquire: %v", pe1, pet())
	t.Logf("A extend to 1.5s via P1: %s; re-acquire for 30s via P2: %s; PTTLs %v", r1, r2, p2.pttls("k"))
	if r2 != "OK <nil>" && r2 != "granted <nil>" {
		t.Fatalf("re-acquire not granted: %s", r2)
	}
	untilA := tA.Add(30*time.Second - quorum.Drift(30*time.Second, 0.01))
	time.Sleep(300 * time.Millisecond)
	t.Logf("300ms later: PTTLs %v (A believes it holds k %v more)", p2.pttls("k"), time.Until(untilA).Round(time.Millisecond))
	time.Sleep(1500 * time.Millisecond)
	var ok bool
	var err error
	if v == "bsm-obtain" {
		ok, err = b.SetNX(ctx, "k", "tokB", 10*time.Second).Result()
	} else {
		_, err = try.Run(ctx, b, []string{"k"}, 10000, "B:1").Result()
		ok, err = errors.Is(err, redis.Nil), nil
	}
	t.Logf("B acquire: %v %v; PTTLs %v", ok, err, p2.pttls("k"))
	if ok && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted k %v before the end of A's validity (A's re-acquisition for 30s via P2 was granted)", time.Until(untilA).Round(time.Millisecond))
	}
}
