package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Extends that fail must not shorten a lock (review, helper-55).

func corpusScript(t *testing.T, name string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("analyze/testdata/corpus/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// TestFailedExtendKeepsTheLock: an extend that lockproxy answers as
// failed (0, nil, NOQUORUM) must leave the holder its earlier validity:
// the holder keeps using the lock until t_send + ttl - drift of its grant.
// An extend to a TTL shorter than the lock's remaining one that reached
// the masters (in time or late) shortened the lock there, although the
// holder heard "not extended", and B was granted inside A's validity
// (review, helper-55). No extend lowers a lock's TTL on a master now.
func TestFailedExtendKeepsTheLock(t *testing.T) {
	touch := corpusScript(t, "redsync-v4.18_touch")
	for _, v := range []string{"touch-noquorum", "setxx-noquorum", "touch-tiny", "pexpire-noquorum"} {
		t.Run(v, func(t *testing.T) {
			c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 100 * time.Millisecond })
			ctx := context.Background()
			a, b := c.client(), c.client()
			tA := time.Now()
			const ttl = 3 * time.Second
			if ok, err := a.SetNX(ctx, "k", "tokA", ttl).Result(); err != nil || !ok {
				t.Fatalf("A: %v %v", ok, err)
			}
			untilA := tA.Add(ttl - quorum.Drift(ttl, 0.01))
			ttl2 := 400 * time.Millisecond
			if strings.HasSuffix(v, "noquorum") {
				c.masters[1].Pause()
				c.masters[2].Pause()
			} else {
				ttl2 = 3 * time.Millisecond
			}
			var res string
			switch {
			case strings.HasPrefix(v, "touch"):
				r, err := touch.Run(ctx, a, []string{"k"}, "tokA", ttl2.Milliseconds()).Result()
				res = fmt.Sprint(r, " ", err)
			case strings.HasPrefix(v, "setxx"):
				r, err := a.SetXX(ctx, "k", "tokA", ttl2).Result()
				res = fmt.Sprint(r, " ", err)
			case strings.HasPrefix(v, "pexpire"):
				r, err := a.PExpire(ctx, "k", ttl2).Result()
				res = fmt.Sprint(r, " ", err)
			}
			if strings.HasSuffix(v, "noquorum") {
				c.masters[1].Resume()
				c.masters[2].Resume()
			}
			t.Logf("A's extend to %v: %s (A holds until %v from now)", ttl2, res, time.Until(untilA).Round(time.Millisecond))
			if strings.HasPrefix(res, "1 ") || strings.HasPrefix(res, "true ") {
				return // granted: A's validity is the extend's
			}
			time.Sleep(ttl2 + 100*time.Millisecond)
			t.Logf("k on the masters %v, PTTL %v", c.onMasters("k"), c.pttls("k"))
			ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result()
			if ok && time.Now().Before(untilA) {
				t.Errorf("DOUBLE GRANT: B granted k %v before the end of A's validity; A's extend answered %s", time.Until(untilA).Round(time.Millisecond), res)
			}
			t.Logf("B: %v %v", ok, err)
		})
	}
}

// TestFailedRenewalKeepsTheHashLock: the same with Redisson's
// renewExpiration on a re-entrant lock (review, helper-55).
func TestFailedRenewalKeepsTheHashLock(t *testing.T) {
	try := corpusScript(t, "redisson-4.x_tryLockInner")
	renew := corpusScript(t, "redisson-3.40_renewExpiration")
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	a, b := c.client(), c.client()
	tA := time.Now()
	if _, err := try.Run(ctx, a, []string{"rl"}, 3000, "A:1").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("A: %v", err)
	}
	untilA := tA.Add(3*time.Second - quorum.Drift(3*time.Second, 0.01))
	c.masters[1].Pause()
	c.masters[2].Pause()
	r, err := renew.Run(ctx, a, []string{"rl"}, 400, "A:1").Result()
	c.masters[1].Resume()
	c.masters[2].Resume()
	t.Logf("A's renewal to 400ms: %v %v", r, err)
	if err == nil && fmt.Sprint(r) == "1" {
		return // renewed: A's validity is the renewal's
	}
	time.Sleep(500 * time.Millisecond)
	_, err = try.Run(ctx, b, []string{"rl"}, 30000, "B:1").Result()
	if errors.Is(err, redis.Nil) && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted rl %v before the end of A's validity; A's renewal answered %v %v", time.Until(untilA).Round(time.Millisecond), r, err)
	}
}

// TestFailedRaisedRenewalKeepsTheLock: a re-entrant renewal whose counts
// differ goes through a raise round after its first vote. The shorter TTL
// was sent at that first vote; when the raise then failed, the client
// heard "not renewed" but every master already had the shorter TTL
// (review, helper-56). It is sent once the raise granted it now.
func TestFailedRaisedRenewalKeepsTheLock(t *testing.T) {
	try := corpusScript(t, "redisson-4.x_tryLockInner")
	renew := corpusScript(t, "redisson-3.40_renewExpiration")
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	a, b := c.client(), c.client()
	tA := time.Now()
	if _, err := try.Run(ctx, a, []string{"rl"}, 3000, "A:1").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("A: %v", err)
	}
	untilA := tA.Add(3*time.Second - quorum.Drift(3*time.Second, 0.01))
	// A missed release on master 0: its count is above the others'.
	if _, err := c.masters[0].Do("HSET", "rl", "A:1", "2"); err != nil {
		t.Fatal(err)
	}
	c.masters[2].Pause()
	done := make(chan string, 1)
	go func() {
		r, err := renew.Run(ctx, a, []string{"rl"}, 400, "A:1").Result()
		done <- fmt.Sprint(r, " ", err)
	}()
	time.Sleep(100 * time.Millisecond) // masters 0 and 1 answered the first round
	c.masters[1].Pause()               // the raise will not reach a quorum
	res := <-done
	c.masters[1].Resume()
	c.masters[2].Resume()
	t.Logf("A's renewal to 400ms: %s; PTTLs now %v", res, c.pttls("rl"))
	if res == "1 <nil>" {
		return // granted: A's validity is the renewal's
	}
	time.Sleep(600 * time.Millisecond)
	t.Logf("PTTLs %v", c.pttls("rl"))
	_, err := try.Run(ctx, b, []string{"rl"}, 30000, "B:1").Result()
	if errors.Is(err, redis.Nil) && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted rl %v before the end of A's validity; A's renewal answered %s", time.Until(untilA).Round(time.Millisecond), res)
	}
}
