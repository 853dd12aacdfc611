package compat

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// Redisson's RFencedLock (3.24 to 4.x; RedissonFencedLock.java) is a
// re-entrant RLock whose tryLock also INCRs a token counter
// (redisson_lock_token:{name}), and whose unlock is RLock's: the lock's
// release message, on redisson_lock__channel:{name}, must come on the
// unlock that ends the lock and on no other. These flows take the lock
// twice with one holder, unlock once (depth 2 → 1: no message), then
// again (one message), a subscriber listening on the channel throughout.
// The scripts are read from redisson/redisson at 6686397 (4.x) and checked
// unchanged at redisson-3.24.0, 3.30.0 and 3.52.0; the unlock is the
// corpus's redisson-4.x_unlockInner, RedissonLock.unlockInnerAsync.

// redissonFencedTryLockToken is RedissonFencedLock.tryLockInnerAsync(
// leaseTime, unit, threadId), the script of tryLockAndGetToken and
// lockAndGetToken: {-1, token} on a grant, {pttl, -1} when held. The same
// text from redisson-3.24.0 to the 4.x sources.
const redissonFencedTryLockToken = "if (redis.call('exists', KEYS[1]) == 0 " +
	"or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
	"local token = redis.call('incr', KEYS[2]);" +
	"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
	"redis.call('pexpire', KEYS[1], ARGV[1]); " +
	"return {-1, token}; " +
	"end; " +
	"return {redis.call('pttl', KEYS[1]), -1};"

// redissonFencedTryLock is its override of RedissonLock.tryLockInnerAsync,
// what lock() and tryLock() of an RFencedLock run: nil on a grant, the
// PTTL when held.
const redissonFencedTryLock = "if ((redis.call('exists', KEYS[1]) == 0) " +
	"or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
	"redis.call('incr', KEYS[2]);" +
	"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
	"redis.call('pexpire', KEYS[1], ARGV[1]); " +
	"return nil; " +
	"end; " +
	"return redis.call('pttl', KEYS[1]);"

// TestFencedLockReleaseMessages runs the flow for RLock (the control) and
// for both of RFencedLock's acquire scripts, through lockproxy on the
// shared 5 masters and against a plain redis-server; then through a
// lockproxy that reaches one master over a link slower than node_timeout.
// There the first acquisition is still in flight to that master when the
// re-entry comes, which expires unwritten: that master holds depth 1 where
// the quorum holds 2. It deleted the lock on the unlock at depth 2 and
// published the release message, which lockproxy delivered, and then
// swallowed the real release (quorum/levelup.go).
func TestFencedLockReleaseMessages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const lag = 400 * time.Millisecond // over node_timeout (250ms)
	addrs := []string{}
	for _, m := range e.masters[:nMasters-1] {
		addrs = append(addrs, m.Addr)
	}
	addrs = append(addrs, laggingRelay(t, e.masters[nMasters-1].Addr, lag))
	slow, stop, err := startProxyAt(addrs, proxy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	kinds := []struct {
		name, tryLock string
		granted       string // the acquire's reply on a grant
	}{
		{"rlock", corpusScript(t, "redisson-4.x_tryLockInner"), "$-1\r\n"},
		{"fenced-lock", redissonFencedTryLock, "$-1\r\n"},
		{"fenced-token", redissonFencedTryLockToken, "*2\r\n:-1\r\n:"},
	}
	for _, k := range kinds {
		t.Run(k.name+"/lockproxy", func(t *testing.T) {
			t.Parallel()
			fencedFlow(t, e, e.addr, k.tryLock, k.granted, dupWait)
		})
		t.Run(k.name+"/plain", func(t *testing.T) {
			t.Parallel()
			p := ownRedis(t)
			fencedFlow(t, p, p.addr, k.tryLock, k.granted, dupWait)
		})
		// A lone copy would come after the lag and the hub's HoldBack.
		t.Run(k.name+"/slow-master", func(t *testing.T) {
			t.Parallel()
			fencedFlow(t, e, slow, k.tryLock, k.granted, lag+time.Second)
		})
	}
}

// fencedFlow: lock twice through addr as one thread (getLockName: the
// client's UUID and the thread's id), unlock twice, with RedissonLock.
// unlockInnerAsync and the latch Redisson deletes after each unlock. quiet
// is how long no message may come after the unlock at depth 2.
func fencedFlow(t *testing.T, e *env, addr, tryLock, granted string, quiet time.Duration) {
	held := e.checkHeld
	if quiet > dupWait {
		// The slow master may have missed both acquisitions: a quorum
		// holds the lock, not every master.
		held = e.checkGranted
	}
	unlockBody := corpusScript(t, "redisson-4.x_unlockInner")
	name := prefixOf(t) + "lock"
	channel := "redisson_lock__channel:{" + name + "}"
	keys := []string{name, "redisson_lock_token:{" + name + "}"}
	const lease = "30000"
	holderID := randomUUID() + ":1"
	t.Cleanup(func() { // a failed run leaves no lock to the next (-count)
		for i := range e.masters {
			e.do(t, i, "DEL", name)
		}
	})
	sub := subscriber(t, addr, false, "SUBSCRIBE", channel)
	holder := dialRaw(t, addr)
	for i := 1; i <= 2; i++ {
		if r := holder.eval(tryLock, keys, lease, holderID); !strings.HasPrefix(r, granted) {
			t.Fatalf("tryLock %d = %q, want a grant (%q…)", i, r, granted)
		}
	}
	must(t, held(t, name, holderID))
	unlock := func(what, want string) {
		t.Helper()
		latch := "redisson_unlock_latch:{" + name + "}:" + randomHex(16)
		r := holder.eval(unlockBody, []string{name, channel, latch}, "0", lease, holderID, "publish", "18000")
		if r != want {
			t.Fatalf("%s = %q, want %q", what, r, want)
		}
		if d := holder.do("DEL", latch); d != ":1\r\n" {
			t.Fatalf("DEL of the unlock latch after the %s = %q, want 1", what, d)
		}
	}
	unlock("unlock at depth 2", ":0\r\n")
	sub.none(quiet, "after the unlock at depth 2")
	must(t, held(t, name, holderID))
	unlock("unlock at depth 1", ":1\r\n")
	sub.expect(wake, frame(false, "message", channel, "0"), "the release message")
	sub.none(dupWait, "a second copy of the release message")
	must(t, e.checkGone(t, name))
}
