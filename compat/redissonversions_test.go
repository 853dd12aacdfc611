package compat

import (
	"path/filepath"
	"strings"
	"testing"
)

// Redisson's RLock across its releases: the scripts of every release from
// 2.2.4 to 4.7.0, taken from each release tag's sources
// (proxy/analyze/testdata/redisson, TestVersionScripts), fall in six
// eras of tryLock, unlock, renewal and forceUnlock scripts and argument
// layouts. Each era's flow runs through lockproxy and against one Redis,
// step for step, and every reply must be the one Redis gives.

// redissonEra is one run of releases with the same RLock scripts.
type redissonEra struct {
	releases                         string
	tryLock, unlock, renew, force    string // testdata/redisson names
	publishArg, latched, forcePubArg bool   // unlock's layout: ARGV[4] publish command; KEYS[3] latch; forceUnlock's ARGV[2]
}

var redissonEras = []redissonEra{
	{releases: "2.6.0-3.10.5", tryLock: "tryLockInner-2.2.4", unlock: "unlockInner-2.2.4", renew: "renewExpiration-2.6", force: "forceUnlock-2.2.1"},
	{releases: "3.10.6-3.12.2", tryLock: "tryLockInner-2.2.4", unlock: "unlockInner-3.10.6", renew: "renewExpiration-2.6", force: "forceUnlock-2.2.1"},
	{releases: "3.12.3-3.21.3", tryLock: "tryLockInner-3.12.3", unlock: "unlockInner-3.10.6", renew: "renewExpiration-2.6", force: "forceUnlock-2.2.1"},
	{releases: "3.22.0-3.23.5", tryLock: "tryLockInner-3.19", unlock: "unlockInner-3.22", renew: "renewExpiration-2.6", force: "forceUnlock-3.22", publishArg: true, forcePubArg: true},
	{releases: "3.24.0-3.43.0", tryLock: "tryLockInner-3.12.3", unlock: "unlockInner-3.24", renew: "renewExpiration-2.6", force: "forceUnlock-3.22", publishArg: true, latched: true, forcePubArg: true},
	{releases: "3.44.0-4.7.0", tryLock: "tryLockInner-3.19", unlock: "unlockInner-3.24", renew: "renewChunk-3.44", force: "forceUnlock-3.22", publishArg: true, latched: true, forcePubArg: true},
}

// redissonScript reads a script of testdata/redisson, checked against its
// manifest.
func redissonScript(t *testing.T, name string) string {
	t.Helper()
	return manifestScript(t, filepath.Join("..", "proxy", "analyze", "testdata", "redisson"), name)
}

// TestRedissonVersions runs each era's RLock flow through lockproxy and
// against plain Redis, and compares every reply.
func TestRedissonVersions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, era := range redissonEras {
		t.Run(era.releases, func(t *testing.T) {
			t.Parallel()
			p := ownRedis(t)
			plain := redissonEraFlow(t, p, p.addr, era)
			proxied := redissonEraFlow(t, e, e.addr, era)
			for i := range plain {
				if plain[i] != proxied[i] {
					t.Errorf("step %d: lockproxy answered %q, Redis %q", i+1, proxied[i], plain[i])
				}
			}
		})
	}
	// RedissonNonReentrantLock (4.4+): the holder's second lock() is an
	// error the client turns into IllegalMonitorStateException, not a wait.
	t.Run("non-reentrant-4.4", func(t *testing.T) {
		t.Parallel()
		body := redissonScript(t, "nonreentrant-tryLockInner-4.4")
		for _, x := range []struct {
			e    *env
			addr string
		}{{e, e.addr}, {ownRedis(t), ""}} {
			addr := x.addr
			if addr == "" {
				addr = x.e.addr
			}
			name := prefixOf(t) + "lock"
			c := dialRaw(t, addr)
			lock := func(id string) string {
				return c.eval(body, []string{name}, "30000", id, "NON_REENTRANT_REACQUIRE")
			}
			if r := lock("h:1"); r != "$-1\r\n" {
				t.Fatalf("%s: lock() = %q, want nil (acquired)", addr, r)
			}
			if r := lock("h:1"); r != "-ERR NON_REENTRANT_REACQUIRE\r\n" {
				t.Fatalf("%s: the holder's second lock() = %q, want the error NON_REENTRANT_REACQUIRE", addr, r)
			}
			if r := lock("o:7"); !strings.HasPrefix(r, ":") {
				t.Fatalf("%s: another thread's lock() = %q, want the lock's PTTL", addr, r)
			}
			c.do("DEL", name) // the next run (-count) starts from no lock
		}
	})
}

// redissonEraFlow: the holder locks twice (re-entry) and renews; a
// stranger's renewal and unlock are refused; the holder's unlocks count
// down, then delete (a subscriber hears one release message); an unlock
// and a forceUnlock of the absent lock; a forceUnlock of a held one. It
// returns every reply, in order, after checking the ones every era agrees
// on.
func redissonEraFlow(t *testing.T, e *env, addr string, era redissonEra) []string {
	tryLock, unlock := redissonScript(t, era.tryLock), redissonScript(t, era.unlock)
	renew, force := redissonScript(t, era.renew), redissonScript(t, era.force)
	name := prefixOf(t) + "lock"
	channel := "redisson_lock__channel:{" + name + "}"
	const lease = "30000"
	holderID, strangerID := randomUUID()+":1", randomUUID()+":9"
	c := dialRaw(t, addr)
	var got []string
	step := func(r, want, what string) {
		t.Helper()
		if want != "" && r != want {
			t.Fatalf("%s = %q, want %q", what, r, want)
		}
		got = append(got, r)
	}
	unlockBy := func(lockName string) string {
		keys := []string{name, channel}
		args := []string{"0", lease, lockName}
		if era.publishArg {
			args = append(args, "publish")
		}
		if era.latched {
			keys = append(keys, "redisson_unlock_latch:{"+name+"}:"+randomHex(16))
			args = append(args, "18000")
		}
		r := c.eval(unlock, keys, args...)
		if era.latched {
			c.do("DEL", keys[2])
		}
		return r
	}
	// renewExpiration and renewChunk (LockTask, one lock per call here)
	// take the same KEYS and ARGV for one lock: answers 1 and {1}.
	renewBy := func(lockName string) string {
		return c.eval(renew, []string{name}, lease, lockName)
	}
	forceUnlock := func() string {
		args := []string{"0"}
		if era.forcePubArg {
			args = append(args, "publish")
		}
		return c.eval(force, []string{name, channel}, args...)
	}

	step(c.eval(tryLock, []string{name}, lease, holderID), "$-1\r\n", "the holder's tryLock")
	step(c.eval(tryLock, []string{name}, lease, holderID), "$-1\r\n", "the holder's re-entry")
	step(renewBy(holderID), "", "the holder's renewal")
	step(renewBy(strangerID), "", "a stranger's renewal")
	step(unlockBy(strangerID), "$-1\r\n", "a stranger's unlock")
	sub := subscriber(t, addr, false, "SUBSCRIBE", channel)
	step(unlockBy(holderID), ":0\r\n", "the unlock at depth 2")
	sub.none(dupWait, "after an unlock that only counted down")
	must(t, e.checkHeld(t, name, holderID))
	step(unlockBy(holderID), ":1\r\n", "the last unlock")
	sub.expect(wake, frame(false, "message", channel, "0"), "the release message")
	sub.none(dupWait, "a second copy of the release message")
	must(t, e.checkGone(t, name))
	// An unlock with no lock there: 1 and a release message before
	// 3.10.6, nil (IllegalMonitorStateException) after.
	step(unlockBy(holderID), "", "an unlock of the absent lock")
	step(forceUnlock(), ":0\r\n", "a forceUnlock of the absent lock")
	step(c.eval(tryLock, []string{name}, lease, strangerID), "$-1\r\n", "another client's tryLock")
	step(forceUnlock(), ":1\r\n", "a forceUnlock of the held lock")
	must(t, e.checkGone(t, name))
	return got
}

// TestRedissonOldUnlockAbsentMasters: before 3.10.6 an unlock answers 1
// where the lock is absent, as where it deletes the holder's last count.
// Masters that lack the lock (at most N-Q while a quorum holds it) must not
// outvote a quorum's 0 at depth 2: the holder would hear "released" and
// stop renewing a lock it still holds.
func TestRedissonOldUnlockAbsentMasters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	unlock := redissonScript(t, "unlockInner-2.2.4")
	name := prefixOf(t) + "lock"
	channel := "redisson_lock__channel:{" + name + "}"
	holderID := randomUUID() + ":1"
	for i := 0; i < e.quorum; i++ { // held at depth 2 on a bare quorum
		e.do(t, i, "HSET", name, holderID, "2")
		e.do(t, i, "PEXPIRE", name, "30000")
	}
	c := dialRaw(t, e.addr)
	if r := c.eval(unlock, []string{name, channel}, "0", "30000", holderID); r != ":0\r\n" {
		t.Fatalf("the unlock at depth 2 = %q, want 0 (a quorum still holds the lock)", r)
	}
	if got := count(e.fields(t, name, holderID), func(v string) bool { return v == "1" }); got < e.quorum {
		t.Fatalf("count 1 on %d masters after the unlock at depth 2: %q", got, e.fields(t, name, holderID))
	}
	if r := c.eval(unlock, []string{name, channel}, "0", "30000", holderID); r != ":1\r\n" {
		t.Fatalf("the last unlock = %q, want 1", r)
	}
	must(t, e.checkGone(t, name))
}
