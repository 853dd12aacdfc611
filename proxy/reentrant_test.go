package proxy_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// redissonOps runs Redisson 4.x's tryLockInner and 3.23's unlockInner as
// RedissonLock sends them (lease 30000 ms, token uuid:threadId).
type redissonOps struct {
	try, unlock *redis.Script
	name        string
}

func newRedissonOps(t *testing.T) redissonOps {
	t.Helper()
	body := func(name string) string {
		b, err := os.ReadFile("analyze/testdata/corpus/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return redissonOps{
		try:    redis.NewScript(body("redisson-4.x_tryLockInner")),
		unlock: redis.NewScript(body("redisson-3.23_unlockInner")),
		name:   "rlock",
	}
}

// counts reads token's count of the lock on each of c's masters.
func (o redissonOps) counts(c *cluster, token string) []string {
	out := make([]string, len(c.masters))
	for i, m := range c.masters {
		out[i], _ = m.Do("HGET", o.name, token)
	}
	return out
}

// tryLock answers "granted" (nil) or "held" (the holder's PTTL).
func (o redissonOps) tryLock(ctx context.Context, c redis.Scripter, token string) (string, error) {
	_, err := o.try.Run(ctx, c, []string{o.name}, "30000", token).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "granted", nil
	case err != nil:
		return "", err
	}
	return "held", nil
}

// unlockOnce answers "1" (released), "0" (count taken off, still held) or
// "nil" (not held).
func (o redissonOps) unlockOnce(ctx context.Context, c redis.Scripter, token string) (string, error) {
	return unlockReply(o.unlock.Run(ctx, c, []string{o.name, "redisson_lock__channel:{" + o.name + "}"}, "0", "30000", token, "publish").Result())
}

// unlockReply reads a Redisson unlock's reply as "1" (released), "0"
// (count taken off, still held) or "nil" (not held).
func unlockReply(v any, err error) (string, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return "nil", nil
	case err != nil:
		return "", err
	}
	if v.(int64) == 1 {
		return "1", nil
	}
	return "0", nil
}

// redissonScript is a script of analyze's testdata/redisson, Redisson's
// scripts as its releases send them.
func redissonScript(t *testing.T, name string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("analyze/testdata/redisson/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// reentrantSteps is the review's sequence: A locks while the masters in
// first are cut off, re-enters while those in second are (and, if that is
// refused, once every master is back), unlocks once, and then B tries the
// lock while A still holds one level. It returns A's unlock and B's
// tryLock as lockproxy answered them.
func reentrantSteps(t *testing.T, c *cluster, relays []*relay, first, second []int) (unlock, bLock string) {
	t.Helper()
	ctx := context.Background()
	ops := newRedissonOps(t)
	const tokA, tokB = "uuidA:1", "uuidB:1"
	a, b := c.client(), c.client()
	counts := func() []string { return ops.counts(c, tokA) }
	cut := func(ms []int, on bool) {
		for _, i := range ms {
			if on {
				c.partition(relays, i)
			} else {
				relays[i].setCut(false)
			}
		}
		if !on {
			c.waitVoting(len(c.masters))
		}
	}
	cut(first, true)
	if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
		t.Fatalf("A's lock: %q %v", r, err)
	}
	cut(first, false)
	cut(second, true)
	r2, err := ops.tryLock(ctx, a, tokA)
	if err != nil {
		t.Fatalf("A's re-lock: %v", err)
	}
	cut(second, false)
	t.Logf("A's re-lock with masters %v away: %s; counts %v", second, r2, counts())
	if r2 != "granted" {
		// Refused while the counts could not be shown to hold A's depth:
		// granted once every master answers.
		if r2, err = ops.tryLock(ctx, a, tokA); err != nil || r2 != "granted" {
			t.Fatalf("A's re-lock with every master back: %q %v", r2, err)
		}
	}
	t.Logf("A locked twice: counts %v", counts())
	if unlock, err = ops.unlockOnce(ctx, a, tokA); err != nil {
		t.Fatal(err)
	}
	t.Logf("A unlocked once: %s; counts %v", unlock, counts())
	if bLock, err = ops.tryLock(ctx, b, tokB); err != nil {
		t.Fatal(err)
	}
	return unlock, bLock
}

// TestReentrantCountsKeepTheDepth: Redisson's re-entrant lock, with two
// minority partitions at different times (each within Redlock's fault
// model; no master loses data). A locks with master 2 away, re-enters with
// master 0 away, and unlocks once: on one Redis it still holds one level
// (the unlock answers 0) and B is refused. Each master's re-entry count
// once counted as a plain yes: the re-entry took the free key on master 2
// with a count of 1, one unlock deleted the lock on masters 0 and 2, A
// heard "released" and B was granted while A still held it (found by
// review; fails without reentrantYes).
func TestReentrantCountsKeepTheDepth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	one := redisproc.ForTest(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: one.Addr, Protocol: 2})
	defer rc.Close()
	var single []string
	for _, step := range []func() (string, error){
		func() (string, error) { return ops.tryLock(ctx, rc, "uuidA:1") },
		func() (string, error) { return ops.tryLock(ctx, rc, "uuidA:1") },
		func() (string, error) { return ops.unlockOnce(ctx, rc, "uuidA:1") },
		func() (string, error) { return ops.tryLock(ctx, rc, "uuidB:1") },
	} {
		r, err := step()
		if err != nil {
			t.Fatal(err)
		}
		single = append(single, r)
	}
	if single[2] != "0" || single[3] != "held" {
		t.Fatalf("one Redis: unlock %s, B's lock %s: the control is wrong", single[2], single[3])
	}
	c, relays := startRelayed(t, 3)
	unlock, bLock := reentrantSteps(t, c, relays, []int{2}, []int{0})
	if unlock != "0" {
		t.Errorf("A's first of two unlocks answered %s, one Redis 0", unlock)
	}
	if bLock != "held" {
		t.Errorf("B's lock while A holds one re-entry level: %s, one Redis held: two holders", bLock)
	}
}

// TestReentrantCountsKeepTheDepthFive: the same with 5 masters and the
// restart quarantine on (a partition loses no data: it never starts), two
// masters away each time.
func TestReentrantCountsKeepTheDepthFive(t *testing.T) {
	t.Parallel()
	c, relays := startRelayed(t, 5, withQuarantine(time.Minute))
	c.waitVoting(5)
	unlock, bLock := reentrantSteps(t, c, relays, []int{3, 4}, []int{0, 1})
	if unlock != "0" {
		t.Errorf("A's first of two unlocks answered %s, one Redis 0", unlock)
	}
	if bLock != "held" {
		t.Errorf("B's lock while A holds one re-entry level: %s, one Redis held: two holders", bLock)
	}
}

// TestReentrantRenewalKeepsTheDepth: a watchdog's renewal gives the holder
// validity, so the masters it renews must hold the holder's depth. A at
// depth 2 holds counts 2, 2, 1 (its re-entry came while master 2 was
// away); master 0 is then cut off longer than the lease while A renews.
// Renewals counted as plain yes votes refreshed masters 1 and 2 (counts 2
// and 1) while master 0's key expired: A's first of two unlocks then
// deleted the lock on masters 0 and 2, and B was granted it while A held
// one level (found by review). Now the renewal is refused (A's watchdog
// hears it fail, as with any lost extend), or, if it were granted until
// master 0 expired, B must still be refused.
func TestReentrantRenewalKeepsTheDepth(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("analyze/testdata/corpus/redisson-3.40_renewExpiration.lua")
	if err != nil {
		t.Fatal(err)
	}
	renewExpiration := redis.NewScript(string(b))
	renewChunk := renewChunkScript(t)
	// Redisson 3's renewal, and Redisson 4's, whose batch of one key is
	// the same quorum extend (batchcmds.go).
	t.Run("renewExpiration", func(t *testing.T) {
		t.Parallel()
		reentrantRenewal(t, func(ctx context.Context, c redis.Scripter, key string, lease int, tok string) (int64, error) {
			return renewExpiration.Run(ctx, c, []string{key}, lease, tok).Int64()
		})
	})
	t.Run("renewChunk", func(t *testing.T) {
		t.Parallel()
		reentrantRenewal(t, func(ctx context.Context, c redis.Scripter, key string, lease int, tok string) (int64, error) {
			v, err := renewChunk.Run(ctx, c, []string{"other", key}, lease, "tokOther", tok).Int64Slice()
			if err == nil && len(v) != 2 {
				t.Fatalf("renewChunk over 2 keys answered %v", v)
			}
			if err != nil {
				return 0, err
			}
			return v[1], nil
		})
	})
}

func reentrantRenewal(t *testing.T, renewOnce func(ctx context.Context, c redis.Scripter, key string, lease int, tok string) (int64, error)) {
	ctx := context.Background()
	ops := newRedissonOps(t)
	const lease = 2000
	const tokA, tokB = "uuidA:1", "uuidB:1"
	c, relays := startRelayed(t, 3)
	a, bc := c.client(), c.client()
	try := func(cl *redis.Client, tok string) string {
		t.Helper()
		_, err := ops.try.Run(ctx, cl, []string{ops.name}, lease, tok).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return "granted"
		case err != nil:
			t.Fatal(err)
		}
		return "held"
	}
	if r := try(a, tokA); r != "granted" {
		t.Fatalf("A's lock: %s", r)
	}
	c.partition(relays, 2)
	if r := try(a, tokA); r != "granted" {
		t.Fatalf("A's re-lock with master 2 away: %s", r)
	}
	c.heal(relays, 2)
	c.partition(relays, 0)
	renewed := 0
	for {
		v, err := renewOnce(ctx, a, ops.name, lease, tokA)
		if err != nil && strings.HasPrefix(err.Error(), "NOQUORUM") {
			// The masters answered slower than node_timeout (a loaded
			// machine): the renewal is not granted, and the watchdog
			// tries again at its next tick, as Redisson's does.
			t.Logf("renewal: %v; trying again", err)
			time.Sleep(lease / 4 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("renewal: %v", err)
		}
		if v != 1 {
			break // refused: the masters renewed could not be shown to hold depth 2
		}
		renewed++
		if e, _ := c.masters[0].Do("EXISTS", ops.name); e == "0" {
			break
		}
		time.Sleep(lease / 4 * time.Millisecond)
	}
	c.heal(relays, 0)
	if e, _ := c.masters[0].Do("EXISTS", ops.name); e == "1" {
		t.Logf("a renewal was refused after %d granted, before master 0's key expired", renewed)
		return
	}
	u, err := ops.unlockOnce(ctx, a, tokA)
	if err != nil {
		t.Fatal(err)
	}
	if r := try(bc, tokB); r != "held" {
		t.Errorf("after %d renewals granted while master 0's key expired, A's first of two unlocks (%s) let B in: %s: two holders", renewed, u, r)
	}
}

// TestReentrantOverCountDoesNotBlock: a release that missed one master
// leaves it a count above the depth (the safe side); with another master
// down, D comes from the over-counted master, and every re-entry of the
// holder was refused for as long as that master stayed down, although a
// quorum was up and the lock was the holder's: Redisson's lock() waited
// for itself while its watchdog kept the lock (found by review). The
// re-entry now raises the other yes master's count (contRaise) and is
// granted.
func TestReentrantOverCountDoesNotBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	const tokA, tokB = "uuidA:1", "uuidB:1"
	c, relays := startRelayed(t, 3)
	a, bc := c.client(), c.client()
	counts := func() []string { return ops.counts(c, tokA) }
	for i := 0; i < 2; i++ {
		if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
			t.Fatalf("A's lock %d: %s %v", i, r, err)
		}
	}
	c.partition(relays, 0)
	u, err := ops.unlockOnce(ctx, a, tokA)
	if err != nil || u != "0" {
		t.Fatalf("A's unlock: %s %v", u, err)
	}
	c.heal(relays, 0)
	t.Logf("A at depth 1 after an unlock that missed master 0: counts %v", counts())
	c.partition(relays, 2) // master 2 goes down and stays down
	refused := 0
	for i := 0; i < 20; i++ {
		r, err := ops.tryLock(ctx, a, tokA)
		if err != nil {
			t.Fatal(err)
		}
		if r == "granted" {
			t.Logf("re-entry %d granted", i)
			break
		}
		refused++
		time.Sleep(100 * time.Millisecond)
	}
	r, _ := ops.tryLock(ctx, bc, tokB)
	t.Logf("counts %v; B: %s", counts(), r)
	if r != "held" {
		t.Errorf("B's lock while A holds it: %s", r)
	}
	if refused == 20 {
		t.Errorf("the holder's re-entry refused 20 times over 2s with 2 of 3 masters up (one Redis: granted); the lock stays held by its watchdog")
	}
}

// TestReentrantUnknownCountDoesNotLowerD: a master of the quorum that
// holds A's depth answers the re-entry with an error (NOREPLICAS: its
// replica link is down for a moment). Its count is unknown; counted as -1
// it lowered D below A's depth, the re-entry was granted with one master
// at the new depth, and after two of three unlocks B was granted while A
// still held one level (found by review; 5 of 5 runs). It now ranks above
// every known count.
func TestReentrantUnknownCountDoesNotLowerD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	const tokA, tokB = "uuidA:1", "uuidB:1"
	c, relays := startRelayed(t, 3)
	a, b := c.client(), c.client()
	counts := func() []string { return ops.counts(c, tokA) }
	c.partition(relays, 2)
	if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
		t.Fatalf("A's lock: %q %v", r, err)
	}
	c.heal(relays, 2)
	if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
		t.Fatalf("A's re-lock: %q %v", r, err)
	}
	t.Logf("depth 2: counts %v", counts())
	if _, err := c.masters[1].Do("CONFIG", "SET", "min-replicas-to-write", "1"); err != nil {
		t.Fatal(err)
	}
	r3, err := ops.tryLock(ctx, a, tokA)
	if _, err := c.masters[1].Do("CONFIG", "SET", "min-replicas-to-write", "0"); err != nil {
		t.Fatal(err)
	}
	t.Logf("A's third lock (master 1 NOREPLICAS): %q %v; counts %v", r3, err, counts())
	if r3 != "granted" {
		return
	}
	for i := 0; i < 2; i++ {
		u, err := ops.unlockOnce(ctx, a, tokA)
		t.Logf("A's unlock %d: %s %v; counts %v", i+1, u, err, counts())
	}
	rb, err := ops.tryLock(ctx, b, tokB)
	t.Logf("B: %s %v", rb, err)
	if rb == "granted" {
		t.Errorf("two holders: B granted while A holds one of three levels (one Redis: held)")
	}
}

// TestReleaseErrorIsNotANotHeld: A holds its lock on 3 masters. Master 1
// answers NOREPLICAS (the script ran nothing there), master 2 is cut off,
// and master 0 deletes. The release counted the error as "not held" and
// told A "released" (releaseUnconfirmed) while masters 1 and 2, a quorum,
// still held it: B was refused until the lease ran out (found by review;
// 5 of 5 runs). A now gets the masters' error.
func TestReleaseErrorIsNotANotHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	const tokA, tokB = "uuidA:1", "uuidB:1"
	c, relays := startRelayed(t, 3)
	a, b := c.client(), c.client()
	counts := func() []string { return ops.counts(c, tokA) }
	if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
		t.Fatalf("A's lock: %q %v", r, err)
	}
	if _, err := c.masters[1].Do("CONFIG", "SET", "min-replicas-to-write", "1"); err != nil {
		t.Fatal(err)
	}
	c.partition(relays, 2)
	u, err := ops.unlockOnce(ctx, a, tokA)
	c.masters[1].Do("CONFIG", "SET", "min-replicas-to-write", "0")
	c.heal(relays, 2)
	t.Logf("A's unlock: %q %v; counts %v", u, err, counts())
	rb, _ := ops.tryLock(ctx, b, tokB)
	t.Logf("B: %s", rb)
	if err == nil && u == "1" && rb == "held" {
		t.Errorf("A told its only level was released (1) while masters 1 and 2, a quorum, still hold it (counts %v): B refused until the lease runs out", counts())
	}
}
