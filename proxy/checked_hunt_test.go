package proxy_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Acquires run checked (quorum.WrapCheck): each master reports whether its
// copy holds the caller's token, and for how long. These three acquires
// were understood by the analyzer and granted to B while A held the lock
// inside its validity, each through a gap in what the check looked at.

// zsetShortMember is Symfony's save, but the caller's member is scored to
// expire a second from now while the key lives for the TTL asked. The
// guards read a sorted set's member score as its expiry (a save drops
// members scored in the past), so after that second another client's save
// takes the lock: the member's score, not the key's PTTL, is the copy's
// life.
const zsetShortMember = `local key = KEYS[1]
local uniqueToken = ARGV[2]
local ttl = tonumber(ARGV[3])
if redis.call("TYPE", key).ok == "string" then
    return false
end
local now = redis.call("TIME")
now = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call("ZREMRANGEBYSCORE", key, "-inf", now)
if redis.call("ZSCORE", key, uniqueToken) then
    if not redis.call("ZSCORE", key, "__write__") and redis.call("ZCOUNT", key, "-inf", "+inf") > 1  then
        return false
    end
elseif redis.call("ZCOUNT", key, "-inf", "+inf") > 0  then
    return false
end
redis.call("ZADD", key, now + 1000, uniqueToken)
redis.call("ZADD", key, now + 1000, "__write__")
redis.call("PEXPIREAT", key, now + ttl)
return true`

func TestCheckedZsetMemberOutlivesValidity(t *testing.T) {
	saveB, err := os.ReadFile("analyze/testdata/libs/symfony-lock_save.lua")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	tSend := time.Now()
	rep, err := h69Eval(t, a, zsetShortMember, []string{"k"}, "0", "tokA", ttl.Milliseconds())
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	t.Logf("A's acquire answered %v %v", rep, err)
	granted := err == nil && rep == int64(1)
	time.Sleep(1500 * time.Millisecond)
	rep, err = h69Eval(t, b, string(saveB), []string{"k"}, "0", "tokB", ttl.Milliseconds())
	t.Logf("B's Symfony save answered %v %v", rep, err)
	if granted && err == nil && rep == int64(1) && time.Now().Before(validUntil) {
		t.Errorf("DOUBLE GRANT: B granted k %v before A's validity ends (A's member was scored to expire after 1s)",
			time.Until(validUntil).Round(time.Millisecond))
	}
	// Symfony's own save still grants, and for the TTL asked.
	rep, err = h69Eval(t, a, string(saveB), []string{"k2"}, "0", "tokA", ttl.Milliseconds())
	if err != nil || rep != int64(1) {
		t.Errorf("Symfony's save on a free key answered %v %v", rep, err)
	}
}

// tokenlessForceBand takes a tokenless lock (the value "1"), and with
// "force", when the key has under 30 s left, sets it again: the probes'
// held keys have far more left, so the band is never seen. A tokenless
// copy that was there before is no proof the caller holds it: anyone's
// acquire writes the same value.
const tokenlessForceBand = `local t = redis.call("PTTL", KEYS[1])
if ARGV[2] == "force" and t > 0 and t < 30000 then
  redis.call("SET", KEYS[1], "1", "PX", ARGV[1])
  return 1
end
if redis.call("SET", KEYS[1], "1", "NX", "PX", ARGV[1]) then return 1 end
return 0`

func TestCheckedTokenlessPutBack(t *testing.T) {
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	tSend := time.Now()
	rep, err := h69Eval(t, a, tokenlessForceBand, []string{"k"}, ttl.Milliseconds(), "no")
	if err != nil || rep != int64(1) {
		t.Fatalf("A's tokenless acquire: %v %v", rep, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	rep, err = h69Eval(t, b, tokenlessForceBand, []string{"k"}, ttl.Milliseconds(), "force")
	t.Logf("B's force-band acquire answered %v %v", rep, err)
	if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
		t.Errorf("DOUBLE GRANT: B granted tokenless k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
	for i, m := range c.masters {
		if p, _ := m.Do("PTTL", "k"); p == "" || p == "-2" {
			t.Errorf("master %d lost A's lock: PTTL %q", i, p)
		}
	}
	// The plain tokenless acquire still works on a free key, and a
	// contender is still told no.
	if rep, err := h69Eval(t, a, tokenlessForceBand, []string{"k2"}, ttl.Milliseconds(), "no"); err != nil || rep != int64(1) {
		t.Errorf("tokenless acquire of a free key answered %v %v", rep, err)
	}
	if rep, err := h69Eval(t, b, tokenlessForceBand, []string{"k2"}, ttl.Milliseconds(), "no"); err != nil || rep != int64(0) {
		t.Errorf("tokenless acquire of a held key answered %v %v, want 0", rep, err)
	}
}

// secondKeyBand acquires KEYS[1] and, with "force", deletes KEYS[2] when
// it has under 30 s left. KEYS[2] is only read on the probes' paths (its
// PTTL), never written: a change to it is a path the probes did not take,
// and KEYS[2] may be another client's lock.
const secondKeyBand = `local t = redis.call("PTTL", KEYS[2])
if ARGV[3] == "force" and t > 0 and t < 30000 then
  redis.call("DEL", KEYS[2])
end
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end
return 0`

func TestCheckedSecondKey(t *testing.T) {
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	b := c.client()
	// Teach the analyzer the script on free keys first.
	if rep, err := h69Eval(t, b, secondKeyBand, []string{"x0", "y0"}, "tokB", ttl.Milliseconds(), "no"); err != nil || rep != int64(1) {
		t.Fatalf("B's acquire on free keys: %v %v", rep, err)
	}
	otherKeyIsALock(t, c, ttl, func() {
		rep, err := h69Eval(t, b, secondKeyBand, []string{"x1", "lockB"}, "tokB", ttl.Milliseconds(), "force")
		t.Logf("B's acquire naming A's lock as its second key answered %v %v", rep, err)
	})
}

// otherKeyIsALock has A take lockB for ttl with SET NX PX, then runs B's
// script (run), which names lockB as a key besides its lock, and checks
// that A's lock is still on every master and that C is not granted it
// inside A's validity.
func otherKeyIsALock(t *testing.T, c *cluster, ttl time.Duration, run func()) {
	t.Helper()
	ctx := context.Background()
	a, cc := c.client(), c.client()
	tSend := time.Now()
	if ok, err := a.SetNX(ctx, "lockB", "tokA", ttl).Result(); err != nil || !ok {
		t.Fatalf("A's SET NX PX: %v %v", ok, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	run()
	for i, m := range c.masters {
		if v, _ := m.Do("GET", "lockB"); v != "tokA" {
			t.Errorf("master %d: A's lock holds %q after B's script, want tokA", i, v)
		}
	}
	ok, err := cc.SetNX(ctx, "lockB", "tokC", ttl).Result()
	if err == nil && ok && time.Now().Before(validUntil) {
		t.Errorf("DOUBLE GRANT: C granted lockB %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
}
