package proxy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// tieUnlock is one re-entrant unlock script of Redisson's, as its client
// sends it, for TestReentrantUnlockShortMasterFirst.
type tieUnlock struct {
	file string                                     // testdata/redisson
	args func(name, token string) ([]string, []any) // KEYS and ARGV
}

var tieUnlocks = []tieUnlock{
	// RLock 3.24 to 4.7: the unlock latch KEYS[3] answers a retried unlock.
	{"unlockInner-3.24", func(name, token string) ([]string, []any) {
		return []string{name, "redisson_lock__channel:{" + name + "}", "redisson_unlock_latch:{" + name + "}:" + token},
			[]any{"0", "30000", token, "publish", "13500"}
	}},
	// RedissonSpinLock 3.24 to 4.7: no publication.
	{"spinlock-unlockInner-3.24", func(name, token string) ([]string, []any) {
		return []string{name, "redisson_unlock_latch:{" + name + "}:" + token}, []any{"30000", token, "13500"}
	}},
}

// run answers "1" (released), "0" (count taken off, still held) or "nil"
// (not held).
func (u tieUnlock) run(ctx context.Context, t *testing.T, c redis.Scripter, name, token string) string {
	t.Helper()
	keys, argv := u.args(name, token)
	r, err := unlockReply(redissonScript(t, u.file).Run(ctx, c, keys, argv...).Result())
	if err != nil {
		t.Fatalf("%s: %v", u.file, err)
	}
	return r
}

// TestReentrantUnlockShortMasterFirst: the tie releaseYes settled for
// Redisson's old unlock (TestOldRedissonUnlockAbsentMasterFirst), with
// Redisson's current unlocks and counts that diverge within Redlock's
// fault model. A locks on every master, re-enters while master 0 is cut
// off (granted by masters 1 and 2 at depth 2; master 0, down, is not
// raised: levelup.go), then unlocks once while master 2 is cut off. On one
// Redis that unlock answers 0: A still holds one level, and Redisson keeps
// renewing only a lock whose unlock answered 0. Master 0, one level short,
// deletes its copy and answers 1; master 1 answers 0; master 2 holds depth
// 2 unanswered. commonYes broke the 1-1 tie by master order, so A heard
// "released" while masters 1 and 2, a quorum, still held its lock: its
// watchdog stops, the lease runs out, and another client is granted the
// lock inside A's critical section.
func TestReentrantUnlockShortMasterFirst(t *testing.T) {
	t.Parallel()
	for _, u := range tieUnlocks {
		t.Run(u.file, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ops := newRedissonOps(t) // tryLock: Redisson 4.x's
			const tokA = "uuidA:1"
			one := redisproc.ForTest(t, 1)[0]
			rc := redis.NewClient(&redis.Options{Addr: one.Addr, Protocol: 2})
			defer rc.Close()
			for range 2 {
				if r, err := ops.tryLock(ctx, rc, tokA); err != nil || r != "granted" {
					t.Fatalf("one Redis: A's lock: %q %v", r, err)
				}
			}
			if r := u.run(ctx, t, rc, ops.name, tokA); r != "0" {
				t.Fatalf("one Redis: A's first of two unlocks: %q; the control is wrong", r)
			}

			c, relays := startRelayed(t, 3)
			a := c.client()
			if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
				t.Fatalf("A's lock: %q %v", r, err)
			}
			waitFor(t, func() bool { return strings.Join(ops.counts(c, tokA), ",") == "1,1,1" }, "A's lock on every master")
			c.partition(relays, 0)
			if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
				t.Fatalf("A's re-entry with master 0 away: %q %v", r, err)
			}
			c.heal(relays, 0)
			if got := strings.Join(ops.counts(c, tokA), ","); got != "1,2,2" {
				t.Fatalf("counts %s once master 0 is back; the scenario needs 1,2,2", got)
			}
			c.partition(relays, 2)
			r := u.run(ctx, t, a, ops.name, tokA)
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
