package proxy_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// h69Eval runs body through lockproxy, waiting out its analysis.
func h69Eval(t *testing.T, c *redis.Client, body string, keys []string, args ...any) (any, error) {
	t.Helper()
	var rep any
	var err error
	for i := 0; i < 100; i++ {
		rep, err = c.Eval(context.Background(), body, keys, args...).Result()
		if err == nil || !strings.Contains(err.Error(), "analy") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return rep, err
}

// releaseAlsoDeletesKEYS2 is accepted as "release string keys=KEYS[1]
// token=ARGV[1]": its lock keys are KEYS[1], and WrapGuard guards only
// those, so the DEL of KEYS[2] goes through whoever holds that key.
const releaseAlsoDeletesKEYS2 = `if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("DEL", KEYS[1])
  redis.call("DEL", KEYS[2])
  return 1
end
return 0`

func TestH69ReleaseDeletesASecondKey(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	a, b := c.client(), c.client()
	const ttl = 20 * time.Second
	tSend := time.Now()
	if ok, err := a.SetNX(ctx, "k", "tokA", ttl).Result(); err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	if ok, err := b.SetNX(ctx, "kb", "tokB", ttl).Result(); err != nil || !ok {
		t.Fatalf("B: %v %v", ok, err)
	}
	rep, err := h69Eval(t, b, releaseAlsoDeletesKEYS2, []string{"kb", "k"}, "tokB")
	t.Logf("B's release of kb (KEYS[2]=k) answered %v %v; k on masters %v", rep, err, c.onMasters("k"))
	if ok, err := b.SetNX(ctx, "k", "tokB", ttl).Result(); err == nil && ok && time.Now().Before(validUntil) {
		t.Fatalf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
}

// zsetReleaseForceBand: Symfony's delete with helper-68's force band.
// Sorted sets are left out of WrapGuard.
const zsetReleaseForceBand = `local key = KEYS[1]
local uniqueToken = ARGV[1]
if redis.call("TYPE", key).ok == "string" then
    return false
end
local t = redis.call("PTTL", key)
if ARGV[2] == "force" and t > 0 and t < 30000 then
    redis.call("DEL", key)
    return true
end
if not redis.call("ZSCORE", key, uniqueToken) then
    return false
end
redis.call("ZREM", key, uniqueToken)
redis.call("ZREM", key, "__write__")
local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
if nil ~= maxExpiration then
    redis.call("PEXPIREAT", key, maxExpiration)
end
return true`

func TestH69ZsetReleaseForceBand(t *testing.T) {
	save, err := os.ReadFile("analyze/testdata/libs/symfony-lock_save.lua")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	const ttl = 20 * time.Second
	tSend := time.Now()
	rep, err := h69Eval(t, a, string(save), []string{"k"}, "0", "tokA", ttl.Milliseconds())
	if err != nil || rep != int64(1) {
		t.Fatalf("A's Symfony save: %v %v", rep, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	rep, err = h69Eval(t, b, zsetReleaseForceBand, []string{"k"}, "tokB", "force")
	t.Logf("B's release of A's lock answered %v %v", rep, err)
	rep, err = h69Eval(t, b, string(save), []string{"k"}, "0", "tokB", ttl.Milliseconds())
	if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
		t.Fatalf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
	t.Logf("B's save answered %v %v", rep, err)
}
