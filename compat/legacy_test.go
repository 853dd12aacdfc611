package compat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/redis/go-redis/v9"
)

// TestLegacySetNXExpire: lock code written before SET NX PX existed,
// SETNX then EXPIRE, runs once default_ttl is set, and is refused with an
// error that says so while it is not.
func TestLegacySetNXExpire(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	key := prefixOf(t) + "lock"

	// default_ttl off (the shared lockproxy): refused, nothing written.
	off := redis.NewClient(&redis.Options{Addr: e.addr, Protocol: 2})
	t.Cleanup(func() { off.Close() })
	if err := off.SetNX(ctx, key, "tok", 0).Err(); err == nil || !strings.Contains(err.Error(), "default_ttl") {
		t.Fatalf("SETNX with default_ttl off: %v, want an error naming default_ttl", err)
	}
	if err := off.Do(ctx, "SET", key, "tok", "NX").Err(); err == nil || !strings.Contains(err.Error(), "default_ttl") {
		t.Fatalf("SET NX without expiry with default_ttl off: %v, want an error naming default_ttl", err)
	}
	must(t, e.checkKeys(t, prefixOf(t)))

	addr := e.proxyFor(t, proxy.Config{DefaultTTL: 10 * time.Second}, nil)
	for _, proto := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
		t.Cleanup(func() { c.Close() })

		// SETNX takes the lock for default_ttl.
		if ok, err := c.SetNX(ctx, key, "tok", 0).Result(); !ok || err != nil {
			t.Fatalf("RESP%d SETNX = %v, %v", proto, ok, err)
		}
		must(t, e.checkHeld(t, key, "tok"))
		must(t, e.checkPTTL(t, key, 9000, 10000))
		if ok, err := c.SetNX(ctx, key, "other", 0).Result(); ok || err != nil {
			t.Fatalf("RESP%d SETNX of a held key = %v, %v; want false", proto, ok, err)
		}
		must(t, e.checkHeld(t, key, "tok"))

		// EXPIRE and PEXPIRE extend it on a quorum.
		if ok, err := c.Expire(ctx, key, 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("RESP%d EXPIRE = %v, %v", proto, ok, err)
		}
		must(t, e.checkPTTL(t, key, 29000, 30000))
		if ok, err := c.PExpire(ctx, key, 20*time.Second).Result(); !ok || err != nil {
			t.Fatalf("RESP%d PEXPIRE = %v, %v", proto, ok, err)
		}
		must(t, e.checkPTTL(t, key, 19000, 20000))
		if d, err := c.TTL(ctx, key).Result(); err != nil || d < 18*time.Second || d > 20*time.Second {
			t.Fatalf("RESP%d TTL = %v, %v", proto, d, err)
		}
		if ok, err := c.Expire(ctx, key+":missing", 30*time.Second).Result(); ok || err != nil {
			t.Fatalf("RESP%d EXPIRE of a missing key = %v, %v; want false", proto, ok, err)
		}
		if err := c.Expire(ctx, key, 2*time.Minute).Err(); err == nil || !strings.Contains(err.Error(), "max_ttl") {
			t.Fatalf("RESP%d EXPIRE beyond max_ttl: %v, want an error naming max_ttl", proto, err)
		}
		must(t, e.checkPTTL(t, key, 18000, 20000))

		// DEL releases it everywhere; another locker then gets it, also
		// with SET NX and no expiry (default_ttl again).
		if n, err := c.Del(ctx, key).Result(); n != 1 || err != nil {
			t.Fatalf("RESP%d DEL = %d, %v", proto, n, err)
		}
		must(t, e.checkGone(t, key))
		if ok, err := c.SetNX(ctx, key, "other", 0).Result(); !ok || err != nil {
			t.Fatalf("RESP%d SETNX after DEL = %v, %v", proto, ok, err)
		}
		must(t, e.checkHeld(t, key, "other"))
		if n, err := c.Del(ctx, key).Result(); n != 1 || err != nil {
			t.Fatalf("RESP%d DEL = %d, %v", proto, n, err)
		}
		if v, err := c.Do(ctx, "SET", key, "plain", "NX").Result(); v != "OK" || err != nil {
			t.Fatalf("RESP%d SET NX without expiry = %v, %v", proto, v, err)
		}
		must(t, e.checkHeld(t, key, "plain"))
		must(t, e.checkPTTL(t, key, 9000, 10000))
		if n, err := c.Del(ctx, key).Result(); n != 1 || err != nil {
			t.Fatalf("RESP%d DEL = %d, %v", proto, n, err)
		}
		must(t, e.checkGone(t, key))

		// The old "SETNX, else GETSET a timestamp" takeover cannot work
		// through lockproxy: GETSET is refused, never sent to a master.
		if err := c.Do(ctx, "GETSET", key, "x").Err(); err == nil || !strings.Contains(err.Error(), "unsupported") {
			t.Fatalf("RESP%d GETSET: %v", proto, err)
		}
	}
	must(t, e.checkKeys(t, prefixOf(t)))
}
