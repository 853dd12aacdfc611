package proxy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redlockRbPTTL is redlock-rb's PTTL_SCRIPT (1.x and 2.x) byte for byte:
// get_remaining_ttl_for_lock and _for_resource, and so locked? and
// valid_lock?, run it. The library loads it with its lock and unlock
// scripts after its first EVALSHA answers NOSCRIPT, and a refused SCRIPT
// LOAD of it failed every lock and unlock.
const redlockRbPTTL = "      return { redis.call(\"get\", KEYS[1]), redis.call(\"pttl\", KEYS[1]) }\n"

// TestValuePTTLRead: the script answers, as on one Redis, [value, PTTL]
// of the lock: here the value a quorum holds and lockproxy's PTTL of it,
// [nil, -2] when no quorum holds a value; by EVAL, and by EVALSHA after
// SCRIPT LOAD. The masters never run it: the engine's own read answers.
func TestValuePTTLRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t, 5)
	cl := c.client()
	const key, tok = "vpttl:lock", "tok-a"
	read := func(how string) (any, int64) {
		t.Helper()
		var v any
		var err error
		switch how {
		case "eval":
			v, err = cl.Eval(ctx, redlockRbPTTL, []string{key}).Result()
		case "evalsha":
			v, err = cl.EvalSha(ctx, sha1hex(redlockRbPTTL), []string{key}).Result()
		}
		if err != nil {
			t.Fatalf("%s of redlock-rb's PTTL script: %v", how, err)
		}
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			t.Fatalf("%s: %#v, want a [value, pttl] pair", how, v)
		}
		ttl, ok := pair[1].(int64)
		if !ok {
			t.Fatalf("%s: PTTL %#v is not an integer", how, pair[1])
		}
		return pair[0], ttl
	}
	if v, ttl := read("eval"); v != nil || ttl != -2 {
		t.Fatalf("free lock: [%v, %d], want [nil, -2]", v, ttl)
	}
	if sha, err := cl.ScriptLoad(ctx, redlockRbPTTL).Result(); err != nil || sha != sha1hex(redlockRbPTTL) {
		t.Fatalf("SCRIPT LOAD: %q %v", sha, err)
	}
	if err := cl.SetArgs(ctx, key, tok, redis.SetArgs{Mode: "NX", TTL: 5e9}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"eval", "evalsha"} {
		if v, ttl := read(how); v != tok || ttl <= 4000 || ttl > 5000 {
			t.Fatalf("%s while held: [%v, %d], want [%s, 4000..5000]", how, v, ttl, tok)
		}
	}
	// Another value on 2 of 5 masters: the quorum's value and its PTTL.
	for _, m := range c.masters[:2] {
		m.Do("SET", key, "other", "PX", "9000")
	}
	if v, ttl := read("evalsha"); v != tok || ttl <= 4000 || ttl > 5000 {
		t.Fatalf("tok on 3 of 5: [%v, %d], want [%s, 4000..5000]", v, ttl, tok)
	}
	// Gone from a third master: no quorum holds a value.
	c.masters[2].Do("DEL", key)
	if v, ttl := read("eval"); v != nil || ttl != -2 {
		t.Fatalf("no value on a quorum: [%v, %d], want [nil, -2]", v, ttl)
	}
	for i, m := range c.masters {
		if got, _ := m.Do("SCRIPT", "EXISTS", sha1hex(redlockRbPTTL)); got != "0" {
			t.Errorf("master %d has the client's script loaded (SCRIPT EXISTS %s): a master ran it", i, got)
		}
	}
}

// TestValuePTTLReadOfOtherTypes: on one Redis the script fails at its GET
// of a key that is not a string (WRONGTYPE), so redlock-rb raises. The
// engine's read of a hash or sorted set (Redisson's locks) stands for the
// key by an internal "\x00hash\x00fields" value, which must never reach the
// client as the lock's value.
func TestValuePTTLReadOfOtherTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t, 3)
	cl := c.client()
	for _, m := range c.masters {
		m.Do("HSET", "vpttl:hash", "f", "1")
		m.Do("PEXPIRE", "vpttl:hash", "9000")
		m.Do("ZADD", "vpttl:zset", "1", "m")
		m.Do("RPUSH", "vpttl:list", "a")
	}
	for _, key := range []string{"vpttl:hash", "vpttl:zset", "vpttl:list"} {
		v, err := cl.Eval(ctx, redlockRbPTTL, []string{key}).Result()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%s: %#v, %v; want WRONGTYPE as one Redis answers", key, v, err)
		}
	}
}
