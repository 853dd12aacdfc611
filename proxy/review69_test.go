package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Review (helper-69) of quorum.WrapGuard (aa094dd): holes left.

// pyRedisLockUnlockVariant is python-redis-lock's unlock with one comment
// line more, so the catalog does not know it and the analyzer does.
const pyRedisLockUnlockVariant = `-- unlock
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
else
    redis.call("del", KEYS[2])
    redis.call("lpush", KEYS[2], 1)
    redis.call("pexpire", KEYS[2], ARGV[2])
    redis.call("del", KEYS[1])
    return 0
end`

func h69Body(name string) string {
	switch name {
	case "builtin":
		return "\n    if redis.call(\"get\", KEYS[1]) ~= ARGV[1] then\n        return 1\n    else\n        redis.call(\"del\", KEYS[2])\n        redis.call(\"lpush\", KEYS[2], 1)\n        redis.call(\"pexpire\", KEYS[2], ARGV[2])\n        redis.call(\"del\", KEYS[1])\n        return 0\n    end\n"
	}
	return pyRedisLockUnlockVariant
}

// TestH69SignalKeyIsAnotherLock: B holds its own lock kb and releases it
// with python-redis-lock's unlock, naming A's lock k as the signal list
// (KEYS[2]): the script DELs KEYS[2] whoever holds it.
func TestH69SignalKeyIsAnotherLock(t *testing.T) {
	for _, v := range []string{"builtin", "understood"} {
		t.Run(v, func(t *testing.T) {
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
			var rep any
			var err error
			for i := 0; i < 50; i++ { // the analysis runs off the request path
				rep, err = b.Eval(ctx, h69Body(v), []string{"kb", "k"}, "tokB", "1").Result()
				if err == nil || !strings.Contains(err.Error(), "being analy") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			types := make([]string, len(c.masters))
			for i, m := range c.masters {
				types[i], _ = m.Do("TYPE", "k")
			}
			t.Logf("B's unlock of kb with KEYS[2]=k answered %v %v; k's type on masters %v", rep, err, types)
			time.Sleep(20 * time.Millisecond)
			if ok, err := b.SetNX(ctx, "k", "tokB", ttl).Result(); err == nil && ok && time.Now().Before(validUntil) {
				t.Fatalf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
			}
		})
	}
}

// TestH69TokenSubstringSkipsGuard: helper-68's force-band release, with
// B's token a substring of A's value ("A" in "tokA"): lockproxy_holds says
// k holds B's token, so the guard dumps nothing and the DEL stands.
func TestH69TokenSubstringSkipsGuard(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	a, b := c.client(), c.client()
	const ttl = 20 * time.Second
	tSend := time.Now()
	if ok, err := a.SetNX(ctx, "k", "tokA", ttl).Result(); err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	rep, err := b.Eval(ctx, releaseForceBand, []string{"k"}, "A", "force").Result()
	t.Logf("B's release answered %v %v; masters %v", rep, err, c.onMasters("k"))
	if ok, err := b.SetNX(ctx, "k", "tokB", ttl).Result(); err == nil && ok && time.Now().Before(validUntil) {
		t.Fatalf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
}
