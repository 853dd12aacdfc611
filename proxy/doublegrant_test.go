package proxy_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Sequences that once granted one lock twice or told a valid holder it
// held nothing (issue 11), against real masters.

// holdOn writes key=token with a TTL directly on the masters idx, as a lock
// granted while the other masters were away leaves it.
func (c *cluster) holdOn(key, token string, ttl time.Duration, idx ...int) {
	c.t.Helper()
	for _, i := range idx {
		if _, err := c.masters[i].Do("SET", key, token, "PX", strconv.FormatInt(ttl.Milliseconds(), 10)); err != nil {
			c.t.Fatalf("SET on master %d: %v", i, err)
		}
	}
}

// TestHolderRetryKeepsItsLock (item 1): A holds k on masters 0-2 only. It
// re-sends its own SET NX while master 2 is paused: the attempt fails, as
// on one Redis, and its undo must not delete A's key on master 2 (its reply
// comes late and says it wrote nothing). Then a stranger must be refused.
func TestHolderRetryKeepsItsLock(t *testing.T) {
	c := startCluster(t, 5, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	a, b := c.client(), c.client()
	c.holdOn("k", "tokA", 30*time.Second, 0, 1, 2)
	if err := c.masters[2].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.masters[2].Resume()
		}
	}()
	if ok, err := a.SetNX(ctx, "k", "tokA", 30*time.Second).Result(); err != nil || ok {
		t.Fatalf("A's re-sent SET NX: ok=%v err=%v, want nil (the key exists)", ok, err)
	}
	if err := c.masters[2].Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitFor(t, func() bool {
		for _, m := range c.engine.Masters() {
			if m.Queued+m.Inflight > 0 {
				return false
			}
		}
		return true
	}, "every master's queue drained (late replies and their undos)")
	if got := c.onMasters("k"); got[0] != "tokA" || got[1] != "tokA" || got[2] != "tokA" {
		t.Fatalf("A's key after its own retry: %v, want tokA on masters 0-2", got)
	}
	if ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result(); err != nil || ok {
		t.Fatalf("stranger's SET NX while A holds k: ok=%v err=%v, want nil: two holders", ok, err)
	}
}

// TestReleaseWithPausedHolderMaster (item 9): A's lock is on masters 0-2;
// master 2 is paused when A releases. 0 and 1 delete it, 3 and 4 never had
// it: the lock is gone from every master that answered, so A is told its
// release worked (1), not that it was not the owner (0).
func TestReleaseWithPausedHolderMaster(t *testing.T) {
	c := startCluster(t, 5, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	a := c.client()
	c.holdOn("k", "tokA", 30*time.Second, 0, 1, 2)
	if err := c.masters[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer c.masters[2].Resume()
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	n, err := release.Run(ctx, a, []string{"k"}, "tokA").Int()
	if err != nil || n != 1 {
		t.Fatalf("valid holder's release with master 2 paused: %v %v, want 1", n, err)
	}
	// And a stranger can take it at once: no quorum holds A's token.
	if ok, err := c.client().SetNX(ctx, "k", "tokB", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX after the release: ok=%v err=%v", ok, err)
	}
}

// TestEvictingMastersCannotDoubleGrant (item 2): masters switched to
// maxmemory-policy volatile-ttl under memory pressure evict A's lock key
// (every lock key has a TTL). lockproxy must stop counting their votes,
// so a stranger is refused instead of granted while A holds the lock.
func TestEvictingMastersCannotDoubleGrant(t *testing.T) {
	c := startCluster(t, 5, func(_ *proxy.Config, qc *quorum.Config) { qc.QuarantineCheck = 50 * time.Millisecond })
	ctx := context.Background()
	if ok, err := c.client().SetNX(ctx, "k", "tokA", 30*time.Second).Result(); err != nil || !ok {
		t.Fatalf("A's acquire: %v %v", ok, err)
	}
	filler := strings.Repeat("x", 64<<10)
	for i, m := range c.masters {
		if _, err := m.Do("CONFIG", "SET", "maxmemory-policy", "volatile-ttl"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Do("CONFIG", "SET", "maxmemory", "4mb"); err != nil {
			t.Fatal(err)
		}
		// Keys that expire later than A's: volatile-ttl evicts A's first.
		for j := 0; j < 200; j++ {
			if _, err := m.Do("SET", "fill:"+strconv.Itoa(j), filler, "PX", "600000"); err != nil {
				t.Fatalf("master %d: %v", i, err)
			}
		}
	}
	if n := count(c.onMasters("k"), "tokA"); n >= 3 {
		t.Fatalf("A's key survived on %d masters: the test did not cause eviction", n)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		excluded := 0
		for _, m := range c.engine.Masters() {
			if strings.Contains(m.Excluded, "volatile-ttl") {
				excluded++
			}
		}
		if excluded == 5 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	ok, err := c.client().SetNX(ctx, "k", "tokB", 10*time.Second).Result()
	if ok {
		t.Fatalf("a stranger got k while A holds it: masters that evicted A's key voted")
	}
	if err == nil || !strings.Contains(err.Error(), "maxmemory-policy is volatile-ttl") {
		t.Fatalf("stranger's acquire: %v %v; want NOQUORUM naming the eviction policy", ok, err)
	}
}
