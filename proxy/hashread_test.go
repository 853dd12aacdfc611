package proxy_test

import (
	"context"
	"strings"
	"testing"
)

// TestHashLockReads: HEXISTS and HGET of a re-entrant hash lock's field,
// as Redisson's isHeldByCurrentThread and getHoldCount send them, are
// quorum reads: held only where a quorum holds the field, whatever counts
// the masters keep; the count a quorum holds at least.
func TestHashLockReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	c, relays := startRelayed(t, 3)
	cl := c.client()
	const tokA, tokB = "uuidA:1", "uuidB:1"
	hexists := func(field string) int64 {
		t.Helper()
		v, err := cl.HExists(ctx, ops.name, field).Result()
		if err != nil {
			t.Fatalf("HEXISTS %s: %v", field, err)
		}
		if v {
			return 1
		}
		return 0
	}
	hget := func(field string) string {
		t.Helper()
		v, err := cl.HGet(ctx, ops.name, field).Result()
		if err != nil && err.Error() != "redis: nil" {
			t.Fatalf("HGET %s: %v", field, err)
		}
		return v
	}
	if hexists(tokA) != 0 || hget(tokA) != "" {
		t.Fatal("a free lock's field reads as held")
	}
	if r, err := ops.tryLock(ctx, cl, tokA); err != nil || r != "granted" {
		t.Fatalf("lock: %s %v", r, err)
	}
	if hexists(tokA) != 1 || hexists(tokB) != 0 || hget(tokA) != "1" {
		t.Fatalf("held by A: HEXISTS A %d, B %d, HGET A %q", hexists(tokA), hexists(tokB), hget(tokA))
	}
	if r, _ := ops.tryLock(ctx, cl, tokA); r != "granted" {
		t.Fatalf("re-entry: %s", r)
	}
	if got := hget(tokA); got != "2" {
		t.Fatalf("hold count after a re-entry: %q, want 2", got)
	}
	// Counts 3, 1, 2: no two masters agree, a quorum holds at least 2,
	// and every master holds the field.
	c.masters[0].Do("HSET", ops.name, tokA, "3")
	c.masters[1].Do("HSET", ops.name, tokA, "1")
	if got, ex := hget(tokA), hexists(tokA); got != "2" || ex != 1 {
		t.Fatalf("counts 3, 1, 2: HGET %q, HEXISTS %d; want 2 and 1", got, ex)
	}
	// B's field on one master of three: not held.
	c.masters[0].Do("HSET", ops.name, tokB, "1")
	if ex := hexists(tokB); ex != 0 {
		t.Fatalf("a field on one master of three reads as held")
	}
	c.partition(relays, 1)
	c.partition(relays, 2)
	if _, err := cl.HExists(ctx, ops.name, tokA).Result(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("HEXISTS with 1 of 3 masters: %v, want NOQUORUM", err)
	}
}
