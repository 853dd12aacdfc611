package proxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// TestFailedReacquireKeepsTheLock: an acquire script that also takes a
// lock its token already holds (the [[scripts]] example "redlock-rb lock"
// of docs/compat.md, and the built-in bsm/redislock obtain with a token
// the caller chose) re-acquires while two of three masters are paused,
// and fails. Its undo must not delete the copy the token held before:
// that is the caller's lock, which its first grant still covers. It did,
// and B was granted the key inside A's validity (review, helper-57).
func TestFailedReacquireKeepsTheLock(t *testing.T) {
	rb := `if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
end
`
	for _, v := range []string{"redlock-rb", "bsm-obtain"} {
		t.Run(v, func(t *testing.T) {
			cat, err := catalog.New([]catalog.ScriptConfig{{Name: "redlock-rb lock", Body: rb, Kind: "acquire", Vote: "ok",
				TTLArg: 2, TTLUnit: "ms", TokenArg: 1, NoReply: "nil"}})
			if err != nil {
				t.Fatal(err)
			}
			c := startCluster(t, 3, func(pc *proxy.Config, qc *quorum.Config) {
				pc.Catalog = cat
				qc.Scripts = cat.MasterScripts()
				qc.NodeTimeout = 100 * time.Millisecond
			})
			ctx := context.Background()
			a, b := c.client(), c.client()
			run := func(ttl time.Duration) (any, error) {
				if v == "redlock-rb" {
					return a.Eval(ctx, rb, []string{"k"}, "tokA", ttl.Milliseconds(), "yes").Result()
				}
				return corpusScript(t, "bsm-redislock-v0.9.4_obtain").Run(ctx, a, []string{"k"}, "tokA", 4, ttl.Milliseconds()).Result()
			}
			tA := time.Now()
			const ttl = 10 * time.Second
			if r, err := run(ttl); err != nil {
				t.Fatalf("A acquire: %v %v", r, err)
			}
			untilA := tA.Add(ttl - quorum.Drift(ttl, 0.01))
			c.masters[1].Pause()
			c.masters[2].Pause()
			r, err := run(ttl)
			v0, _ := c.masters[0].Do("GET", "k")
			t.Logf("A's re-acquisition with 2 of 3 masters paused: %v %v; master 0 holds %q", r, err, v0)
			if err == nil {
				t.Fatalf("the re-acquisition was granted with 2 of 3 masters paused: %v", r)
			}
			c.masters[1].Resume()
			c.masters[2].Resume()
			time.Sleep(300 * time.Millisecond) // the late replies come and their undos run
			t.Logf("after resume: masters %v", c.onMasters("k"))
			ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result()
			t.Logf("B SET NX: %v %v", ok, err)
			if ok && time.Now().Before(untilA) {
				t.Errorf("DOUBLE GRANT: B granted k %v before the end of A's validity (A's first grant, 10s; its re-acquisition failed)", time.Until(untilA).Round(time.Millisecond))
			}
		})
	}
}

// TestFailedReentryKeepsTheHashLock: Redisson's tryLockInner re-entered
// by its holder with a shorter lease, while two of three masters are
// paused, fails (NOQUORUM). It must not lower the hash's TTL on the
// masters it reaches (the paused ones when they resume): its undo takes
// the count back, not the TTL, and A's first grant (10s) was cut to
// 400ms, B granted inside it (review, helper-57; the re-entry's kin of
// TestFailedRenewalKeepsTheHashLock).
func TestFailedReentryKeepsTheHashLock(t *testing.T) {
	try := corpusScript(t, "redisson-4.x_tryLockInner")
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	a, b := c.client(), c.client()
	tA := time.Now()
	const ttl = 10 * time.Second
	if _, err := try.Run(ctx, a, []string{"rl"}, ttl.Milliseconds(), "A:1").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("A: %v", err)
	}
	untilA := tA.Add(ttl - quorum.Drift(ttl, 0.01))
	c.masters[1].Pause()
	c.masters[2].Pause()
	r, err := try.Run(ctx, a, []string{"rl"}, 400, "A:1").Result()
	c.masters[1].Resume()
	c.masters[2].Resume()
	t.Logf("A's re-entry with a 400ms lease, 2 of 3 masters paused: %v %v", r, err)
	if err == nil || errors.Is(err, redis.Nil) {
		t.Fatalf("the re-entry was granted with 2 of 3 masters paused: %v %v", r, err)
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("200ms later: PTTLs on masters %v", c.pttls("rl"))
	time.Sleep(400 * time.Millisecond)
	_, errB := try.Run(ctx, b, []string{"rl"}, 30000, "B:1").Result()
	t.Logf("B tryLock: %v", errB)
	if errors.Is(errB, redis.Nil) && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted rl %v before the end of A's validity; A's re-entry answered %v %v", time.Until(untilA).Round(time.Millisecond), r, err)
	}
}
