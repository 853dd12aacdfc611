package proxy_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy/analyze"
	"github.com/lockproxy/lockproxy/quorum"
)

// Acquires and extends run checked (quorum.WrapCheck). These are Symfony
// RedisStore lookalikes (sorted set of tokens scored by expiry) whose extra
// branch the analyzer's probes do not take: held keys in the probes have
// about 7,000,003 ms left, so a branch on a realistic remaining TTL, or on
// a free argument's constant with it, is never seen. Each runs while A
// holds the lock with validity left; B must not be granted (review,
// helper-83).

// zsetSaveForceBand is Symfony's save with a force band: with "force" and
// under 30 s left, it drops every member first.
const zsetSaveForceBand = `local key = KEYS[1]
local uniqueToken = ARGV[2]
local ttl = tonumber(ARGV[3])
if redis.call("TYPE", key).ok == "string" then
    return false
end
local now = redis.call("TIME")
now = now[1] * 1000 + math.floor(now[2] / 1000)
local t = redis.call("PTTL", key)
if ARGV[4] == "force" and t > 0 and t < 30000 then
    redis.call("DEL", key)
end
redis.call("ZREMRANGEBYSCORE", key, "-inf", now)
if redis.call("ZSCORE", key, uniqueToken) then
    if not redis.call("ZSCORE", key, "__write__") and redis.call("ZCOUNT", key, "-inf", "+inf") > 1  then
        return false
    end
elseif redis.call("ZCOUNT", key, "-inf", "+inf") > 0  then
    return false
end
redis.call("ZADD", key, now + ttl, uniqueToken)
redis.call("ZADD", key, now + ttl, "__write__")
local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
redis.call("PEXPIREAT", key, maxExpiration)
return true`

// zsetSaveGrace is Symfony's save that counts members expiring within a
// grace (ARGV[4] ms) as expired. The probes try a grace past the holder's
// remaining TTL: the analyzer marks it a force acquire, which takes the
// lock whoever holds it by design (allow_force_acquire), so it is no
// candidate for the check's put-back (TestH83ZsetSaveGraceIsForce).
const zsetSaveGrace = `local key = KEYS[1]
local uniqueToken = ARGV[2]
local ttl = tonumber(ARGV[3])
local grace = tonumber(ARGV[4]) or 0
if redis.call("TYPE", key).ok == "string" then
    return false
end
local now = redis.call("TIME")
now = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call("ZREMRANGEBYSCORE", key, "-inf", now + grace)
if redis.call("ZSCORE", key, uniqueToken) then
    if not redis.call("ZSCORE", key, "__write__") and redis.call("ZCOUNT", key, "-inf", "+inf") > 1  then
        return false
    end
elseif redis.call("ZCOUNT", key, "-inf", "+inf") > 0  then
    return false
end
redis.call("ZADD", key, now + ttl, uniqueToken)
redis.call("ZADD", key, now + ttl, "__write__")
local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
redis.call("PEXPIREAT", key, maxExpiration)
return true`

// zsetExtendForceBand is Symfony's putOffExpiration with a force band:
// with "force" and under 30 s left it adds the caller's token (as if it
// held the lock) and re-scores every other member to now, expiring it.
const zsetExtendForceBand = `local key = KEYS[1]
local uniqueToken = ARGV[2]
local ttl = tonumber(ARGV[3])
if redis.call("TYPE", key).ok == "string" then
    return false
end
local now = redis.call("TIME")
now = now[1] * 1000 + math.floor(now[2] / 1000)
local t = redis.call("PTTL", key)
if ARGV[4] == "force" and t > 0 and t < 30000 then
    local ms = redis.call("ZRANGE", key, 0, -1)
    for _, m in ipairs(ms) do redis.call("ZADD", key, now, m) end
    redis.call("ZADD", key, now + ttl, uniqueToken)
end
if not redis.call("ZSCORE", key, uniqueToken) then
    return false
end
redis.call("ZADD", key, now + ttl, uniqueToken)
if redis.call("ZSCORE", key, "__write__") then
    redis.call("ZADD", key, now + ttl, "__write__")
end
local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
redis.call("PEXPIREAT", key, maxExpiration)
return true`

func TestH83ZsetCheckedAcquireExtend(t *testing.T) {
	saveB, err := os.ReadFile("analyze/testdata/libs/symfony-lock_save.lua")
	if err != nil {
		t.Fatal(err)
	}
	save := string(saveB)
	const ttl = 20 * time.Second
	cases := []struct {
		name   string
		script string
		args   []any
	}{
		{"save force band", zsetSaveForceBand, []any{"0", "tokB", ttl.Milliseconds(), "force"}},
		{"extend force band", zsetExtendForceBand, []any{"0", "tokB", ttl.Milliseconds(), "force"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 3)
			a, b := c.client(), c.client()
			// Teach the analyzer the script first, on another key.
			if rep, err := h69Eval(t, b, tc.script, []string{"other"}, tc.args...); err != nil {
				t.Logf("B's script on a free key answered %v %v", rep, err)
			}
			tSend := time.Now()
			rep, err := h69Eval(t, a, save, []string{"k"}, "0", "tokA", ttl.Milliseconds())
			if err != nil || rep != int64(1) {
				t.Fatalf("A's Symfony save: %v %v", rep, err)
			}
			validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
			rep, err = h69Eval(t, b, tc.script, []string{"k"}, tc.args...)
			t.Logf("B's script answered %v %v", rep, err)
			if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
				t.Errorf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
			}
			// A's lock is still there, on a quorum, for A's own extend.
			put, _ := os.ReadFile("analyze/testdata/libs/symfony-lock_put-off-expiration.lua")
			rep, err = h69Eval(t, a, string(put), []string{"k"}, "0", "tokA", ttl.Milliseconds())
			if err != nil || rep != int64(1) {
				t.Errorf("A's extend of its own lock answered %v %v", rep, err)
			}
		})
	}
}

// TestH83ZsetSaveGraceIsForce: the grace lookalike is no hole in the
// checked run: the analyzer itself says it takes a held lock.
func TestH83ZsetSaveGraceIsForce(t *testing.T) {
	sem, err := analyze.Analyze([]byte(zsetSaveGrace), h83Opts)
	if err != nil {
		t.Fatal(err)
	}
	if sem.Kind != analyze.Acquire || !sem.Force {
		t.Errorf("grace save understood as %s, want a force acquire", sem)
	}
	for name, s := range map[string]string{"save force band": zsetSaveForceBand, "extend force band": zsetExtendForceBand} {
		sem, err := analyze.Analyze([]byte(s), h83Opts)
		if err != nil {
			t.Fatal(err)
		}
		if sem.Force {
			t.Errorf("%s understood as %s: the checked run's put-back is what stops it, not the verdict", name, sem)
		}
	}
}

// TestH83ZsetCheckedTwoProxies: A takes the lock through one lockproxy, B
// runs the force-band save and extend through another on the same
// masters. The put-back runs on the masters, so no lockproxy's state is
// needed for it.
func TestH83ZsetCheckedTwoProxies(t *testing.T) {
	saveB, err := os.ReadFile("analyze/testdata/libs/symfony-lock_save.lua")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 20 * time.Second
	ms := redisproc.ForTest(t, 3)
	p1, p2 := startFront(t, ms, false), startFront(t, ms, false)
	p1.waitUp(3)
	p2.waitUp(3)
	p1.waitVoting(3)
	p2.waitVoting(3)
	a, b := p1.client(), p2.client()
	for i, script := range []string{zsetSaveForceBand, zsetExtendForceBand} {
		key := "k" + strconv.Itoa(i)
		tSend := time.Now()
		rep, err := h69Eval(t, a, string(saveB), []string{key}, "0", "tokA", ttl.Milliseconds())
		if err != nil || rep != int64(1) {
			t.Fatalf("A's Symfony save: %v %v", rep, err)
		}
		validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
		rep, err = h69Eval(t, b, script, []string{key}, "0", "tokB", ttl.Milliseconds(), "force")
		if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
			t.Errorf("script %d: DOUBLE GRANT through a second lockproxy, %v before A's validity ends", i, time.Until(validUntil).Round(time.Millisecond))
		}
	}
}

// TestH83ZsetCheckedSharedMember: B already holds a member of the set
// beside A's (a shared lock written by hand). Its force-band save drops
// A's member: the set is put back with B's member in it, and B's vote is
// still no.
func TestH83ZsetCheckedSharedMember(t *testing.T) {
	c := startCluster(t, 3)
	b := c.client()
	for _, m := range c.masters {
		now := time.Now().UnixMilli()
		m.Do("ZADD", "k", strconv.FormatInt(now+20000, 10), "tokA")
		m.Do("ZADD", "k", strconv.FormatInt(now+15000, 10), "tokB")
		m.Do("PEXPIREAT", "k", strconv.FormatInt(now+20000, 10))
	}
	rep, err := h69Eval(t, b, zsetSaveForceBand, []string{"k"}, "0", "tokB", 20000, "force")
	if err == nil && rep == int64(1) {
		t.Errorf("DOUBLE GRANT: B's force-band save granted over A's unexpired member")
	}
	for i, m := range c.masters {
		if s, _ := m.Do("ZSCORE", "k", "tokA"); s == "" || s == "(nil)" {
			t.Errorf("master %d lost A's member", i)
		}
	}
}

// h83Opts: the verdicts only, with room for -race's slower analysis.
var h83Opts = analyze.Options{MaxCPU: 10 * time.Second, Timeout: 30 * time.Second}

// TestH83SetAcquireIsRefused: the same force band on a set-shaped lock
// never reaches a master: the analyzer models no set writes (SADD), so
// the check's put-back, which leaves sets alone, is not needed for
// analyzed scripts.
func TestH83SetAcquireIsRefused(t *testing.T) {
	const setForceBand = `local t = redis.call("PTTL", KEYS[1])
if ARGV[3] == "force" and t > 0 and t < 30000 then
  redis.call("DEL", KEYS[1])
end
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
redis.call("SADD", KEYS[1], ARGV[1])
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return 1`
	if sem, err := analyze.Analyze([]byte(setForceBand), h83Opts); err == nil {
		t.Errorf("a set-shaped acquire understood as %s; its force band would take a held set unguarded", sem)
	}
}
