package proxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// oldRedissonOps is redissonOps with the scripts of Redisson 2.6.0 to
// 3.10.5, whose unlock answers 1 and publishes where the lock is absent
// (analyze's AbsentIsYes), as where it deletes the holder's last count.
func oldRedissonOps(t *testing.T, unlock string) redissonOps {
	t.Helper()
	return redissonOps{try: redissonScript(t, "tryLockInner-2.2.4"), unlock: redissonScript(t, unlock), name: "rlock"}
}

// unlockOld is unlockOnce with the old unlock's arguments (no publish
// command in ARGV).
func (o redissonOps) unlockOld(ctx context.Context, c redis.Scripter, token string) (string, error) {
	return unlockReply(o.unlock.Run(ctx, c, []string{o.name, "redisson_lock__channel:{" + o.name + "}"}, "0", "30000", token).Result())
}

// TestOldRedissonUnlockAbsentMasterFirst: A locks twice with master 0
// away (masters 1 and 2 hold it at depth 2, master 0 lacks it, within
// Redlock's fault model), then unlocks once while master 2 is cut off. On
// one Redis that unlock answers 0: A still holds one level, and Redisson
// before 3.10.6 keeps renewing it only when it hears 0. Through lockproxy
// master 0 answers 1 (no lock there, a yes by AbsentIsYes) and master 1
// answers 0: a tie that commonYes broke by master order, so A heard
// "released" while masters 1 and 2, a quorum, still held its lock, and its
// watchdog stopped (found by review). Redisson 3.10.6's unlock, which
// answers nil where there is no lock, is the control.
func TestOldRedissonUnlockAbsentMasterFirst(t *testing.T) {
	t.Parallel()
	for _, unlock := range []string{"unlockInner-2.2.4", "unlockInner-3.10.6"} {
		t.Run(unlock, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ops := oldRedissonOps(t, unlock)
			const tokA = "uuidA:1"
			one := redisproc.ForTest(t, 1)[0]
			rc := redis.NewClient(&redis.Options{Addr: one.Addr, Protocol: 2})
			defer rc.Close()
			for range 2 {
				if r, err := ops.tryLock(ctx, rc, tokA); err != nil || r != "granted" {
					t.Fatalf("one Redis: A's lock: %q %v", r, err)
				}
			}
			if r, err := ops.unlockOld(ctx, rc, tokA); err != nil || r != "0" {
				t.Fatalf("one Redis: A's first of two unlocks: %q %v; the control is wrong", r, err)
			}

			c, relays := startRelayed(t, 3)
			a := c.client()
			c.partition(relays, 0)
			for range 2 {
				if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
					t.Fatalf("A's lock with master 0 away: %q %v", r, err)
				}
			}
			c.heal(relays, 0)
			c.partition(relays, 2)
			r, err := ops.unlockOld(ctx, a, tokA)
			if err != nil {
				t.Fatalf("A's first of two unlocks: %v", err)
			}
			counts := ops.counts(c, tokA)
			t.Logf("A's first of two unlocks with master 2 away: %s; counts %q", r, counts)
			if held := count(counts, "1") + count(counts, "2"); held < 2 {
				t.Fatalf("counts %q: the lock is not on a quorum, the scenario is wrong", counts)
			}
			if r != "0" {
				t.Errorf("A's first of two unlocks answered %s while a quorum holds its lock (counts %q); one Redis 0", r, counts)
			}
		})
	}
}

// TestOldRedissonUnlockAfterRestartQuarantine: the same through a master
// restart. A holds the lock at depth 2 on every master and renews it (the
// watchdog) while master 0 restarts empty and sits out its quarantine;
// then master 0 votes without the lock, and A's first of two unlocks with
// master 2 cut off must still answer 0.
func TestOldRedissonUnlockAfterRestartQuarantine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := oldRedissonOps(t, "unlockInner-2.2.4")
	renew := redissonScript(t, "renewExpiration-2.6")
	// The lease only has to outlive the gaps between A's renewals, and
	// the last one until the unlock (a cut to wait for); a 1s lease ran
	// out on a loaded machine. It stays under max_ttl, the quarantine's
	// length and the largest TTL a client may ask for.
	const tokA, lease, maxTTL = "uuidA:1", 4000, 5 * time.Second
	const every = 250 * time.Millisecond // A's renewals: as the watchdog, well within the lease
	// startRelayed's 100ms node_timeout, which none of this depends on
	// (a cut closes the relay's connections: the master is seen down at
	// once), left every master unanswered on a loaded machine: NOQUORUM.
	slowOK := func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 2 * time.Second }
	c, relays := startRelayed(t, 3, withQuarantine(maxTTL), slowOK)
	c.waitVoting(3)
	a := c.client()
	for range 2 {
		if _, err := ops.try.Run(ctx, a, []string{ops.name}, lease, tokA).Result(); !errors.Is(err, redis.Nil) {
			t.Fatalf("A's lock: %v, want nil (granted)", err)
		}
	}
	renewed := time.Now() // A's last grant or renewal
	if err := c.masters[0].Restart(); err != nil {
		t.Fatal(err)
	}
	// The watchdog renews while master 0 is seen restarted, quarantined
	// (max_ttl, longer than the lease) and voting again.
	deadline := time.Now().Add(maxTTL + 15*time.Second)
	renewUntil := func(done func() bool, what string) {
		t.Helper()
		for !done() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v: %+v", what, maxTTL+15*time.Second, c.engine.Masters())
			}
			sent := time.Now()
			if v, err := renew.Run(ctx, a, []string{ops.name}, lease, tokA).Int64(); err != nil || v != 1 {
				t.Fatalf("A's renewal: %d %v (sent %v after the last one, whose lease is %dms)",
					v, err, sent.Sub(renewed).Round(time.Millisecond), lease)
			}
			renewed = sent // its lease runs from no earlier than this
			time.Sleep(every)
		}
	}
	renewUntil(func() bool { return c.voting() < 3 }, "master 0 quarantined")
	renewUntil(func() bool { return c.voting() == 3 }, "master 0 voting again")
	if got, _ := c.masters[0].Do("EXISTS", ops.name); got != "0" {
		t.Fatalf("master 0 has the lock after its restart (EXISTS %s): the scenario is wrong", got)
	}
	c.partition(relays, 2)
	sent := time.Now()
	v, err := ops.unlock.Run(ctx, a, []string{ops.name, "redisson_lock__channel:{" + ops.name + "}"}, "0", lease, tokA).Int64()
	if err != nil {
		t.Fatalf("A's first of two unlocks: %v", err)
	}
	counts := ops.counts(c, tokA)
	if held := count(counts, "1") + count(counts, "2"); held < 2 {
		t.Fatalf("counts %q: the lock is not on a quorum, the scenario is wrong (the unlock was sent %v after A's last renewal, whose lease is %dms)",
			counts, sent.Sub(renewed).Round(time.Millisecond), lease)
	}
	if v != 0 {
		t.Errorf("A's first of two unlocks answered %d while a quorum holds its lock (counts %q); one Redis 0", v, counts)
	}
}
