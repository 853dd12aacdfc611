package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Review (helper-68). Absolute expiries in scripts that are not checked by
// quorum.WrapCheck: 740167e checks a copy's PTTL against the validity for
// every checked script, but fenced acquires (their yes is a counter) and
// tokenless acquires are not checked at all, so an absolute expiry there
// still expires on masters whose clocks run ahead of lockproxy's inside
// the validity lockproxy accounted.

// fencedAcquirePXAT is the documented fenced acquire (fencing_test.go's
// fencedAcquire) with an absolute deadline, as rueidislock's acqat takes one.
const fencedAcquirePXAT = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`

// tokenlessAcquirePXAT: a tokenless lock (the value is a constant) with an
// absolute deadline.
const tokenlessAcquirePXAT = `return redis.call('SET', KEYS[1], '1', 'NX', 'PXAT', ARGV[1])`

func TestUncheckedAbsoluteExpiryWithMasterClockAhead(t *testing.T) {
	for _, v := range []string{"fenced", "tokenless"} {
		t.Run(v+"/ahead", func(t *testing.T) { uncheckedAbsoluteAhead(t, v, 1500*time.Millisecond, false) })
		t.Run(v+"/within-drift", func(t *testing.T) { uncheckedAbsoluteAhead(t, v, 10*time.Millisecond, true) })
	}
}

func uncheckedAbsoluteAhead(t *testing.T, v string, ahead time.Duration, wantGrant bool) {
	masters := mastersAhead(t, 3, ahead)
	p := startFront(t, masters, false)
	p.waitUp(3)
	p.waitVoting(3)
	ctx := context.Background()
	a, b := p.client(), p.client()
	const ttl = 3 * time.Second
	pxat := time.Now().Add(ttl)
	granted := false
	switch v {
	case "fenced":
		r, err := a.Eval(ctx, fencedAcquirePXAT, []string{"k", "fence"}, "tokA", pxat.UnixMilli()).Result()
		if err != nil {
			t.Fatalf("A fenced acquire: %v %v", r, err)
		}
		granted = r.(int64) > 0
	case "tokenless":
		r, err := a.Eval(ctx, tokenlessAcquirePXAT, []string{"k"}, pxat.UnixMilli()).Result()
		switch {
		case err == nil && r == "OK":
			granted = true
		case err != redis.Nil:
			t.Fatalf("A tokenless acquire: %v %v", r, err)
		}
	}
	t.Logf("A granted = %v; masters' PTTLs %v", granted, p.pttls("k"))
	if !granted {
		if wantGrant {
			t.Fatalf("A refused with the masters %v ahead, within the drift allowance", ahead)
		}
		return
	}
	untilA := pxat.Add(-quorum.Drift(ttl, 0.01))
	refusedUntil(t, b, untilA, ahead)
}

// Releases are not checked (WrapCheck covers acquires and extends), so an
// understood release that deletes another holder's lock on a path the
// probes never took is a double grant. The probes try a free argument at
// the script's constants with the held lock at 7,000,003 ms (or 2e15 ms in
// the long-held analysis), and at realistic remaining TTLs only with the
// arguments at probe values or at numbers around each TTL: never a
// constant and a realistic remaining TTL together.

// releaseForceBand: a release that, with ARGV[2] = "force", deletes a lock
// with under 30 s left whoever holds it (the first analysis accepts it).
const releaseForceBand = `local t = redis.call("PTTL", KEYS[1])
if ARGV[2] == "force" and t > 0 and t < 30000 then
  return redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`

// releaseGuardedForceBand: the same behind an ATOMIC_EXTEND-like guard on
// ARGV[2] (refused by the first analysis, accepted by the long-held one).
const releaseGuardedForceBand = `local t = redis.call("PTTL", KEYS[1])
if t == -2 then return -2 end
if t < tonumber(ARGV[2]) then return 0 end
if ARGV[3] == "force" and t < 30000 then
  return redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`

// releaseGuardTwoArgs: no constant at all: behind the guard on ARGV[2], a
// second numeric argument ARGV[3] opens a band of realistic remaining
// TTLs (ARGV[3] < t < 30 s) where anyone's lock is deleted. The probes set
// one free argument at a time around each remaining TTL: with ARGV[3] low,
// ARGV[2] stays at its probe value and the guard turns the script away.
const releaseGuardTwoArgs = `local t = redis.call("PTTL", KEYS[1])
if t == -2 then return -2 end
if t < tonumber(ARGV[2]) then return 0 end
if t > tonumber(ARGV[3]) and t < 30000 then
  return redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`

// readGCBand: understood as a read (the caller's PTTL, reply-is-ttl); with
// ARGV[2] = "gc" it deletes a lock with under 30 s left whoever holds it.
// Reads are not checked either.
const readGCBand = `local t = redis.call("PTTL", KEYS[1])
if ARGV[2] == "gc" and t > 0 and t < 30000 then
  redis.call("DEL", KEYS[1])
  return 0
end
if redis.call("GET", KEYS[1]) == ARGV[1] then return t end
return -2`

func TestReleaseConstantTimesTTLBand(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		argv       []any
	}{
		{"first analysis", releaseForceBand, []any{"tokB", "force"}},
		{"long-held analysis", releaseGuardedForceBand, []any{"tokB", "0", "force"}},
		{"long-held analysis, two numeric arguments", releaseGuardTwoArgs, []any{"tokB", "0", "0"}},
		{"read", readGCBand, []any{"tokB", "gc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 3)
			ctx := context.Background()
			a, b := c.client(), c.client()
			const ttl = 20 * time.Second
			tSend := time.Now()
			if ok, err := a.SetNX(ctx, "k", "tokA", ttl).Result(); err != nil || !ok {
				t.Fatalf("A: %v %v", ok, err)
			}
			validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
			rep, err := b.Eval(ctx, tc.body, []string{"k"}, tc.argv...).Result()
			if err == nil || !strings.Contains(err.Error(), "which another client holds; it was put back") {
				t.Errorf("B's release or read of A's lock answered %v %v, want the guard's error (quorum.WrapGuard)", rep, err)
			}
			t.Logf("B's release of A's lock answered %v %v; masters %v", rep, err, c.onMasters("k"))
			for i, v := range c.onMasters("k") {
				if v != "tokA" {
					t.Errorf("master %d holds %q after B's script, want A's tokA put back", i, v)
				}
			}
			if ok, err := b.SetNX(ctx, "k", "tokB", ttl).Result(); err == nil && ok && time.Now().Before(validUntil) {
				t.Fatalf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
			}
		})
	}
}
