package proxy_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// rlockAcquire is pjimming/rlock's acquire (reach sweep of 2026-11-28):
// Redisson's re-entrant hash lock, answering 0 where Redisson answers nil,
// and the holder's PTTL when another holds it.
const rlockAcquire = `
if (redis.call('EXISTS', KEYS[1]) == 0) then
    -- don't have lock
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return 0
end
if (redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1) then
    -- reentry
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return 0
end
return redis.call('PTTL', KEYS[1])`

// TestYesZeroAcquire: an understood acquire whose yes is 0 and whose no
// is the holder's PTTL runs through lockproxy (it was refused: its no
// reply's placeholder, 0, read as its yes). The client hears 0 when it
// holds the lock on every master, a positive PTTL when another does.
func TestYesZeroAcquire(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := context.Background()
	a := c.client()
	acquire := redis.NewScript(rlockAcquire)
	run := func(token string) int64 {
		t.Helper()
		v, err := acquire.Run(ctx, a, []string{"rl"}, token, "5000").Int64()
		if err != nil {
			t.Fatalf("%s's acquire: %v", token, err)
		}
		return v
	}
	counts := func(token string) []string {
		out := make([]string, len(c.masters))
		for i, m := range c.masters {
			out[i], _ = m.Do("HGET", "rl", token)
		}
		return out
	}
	if v := run("A"); v != 0 {
		t.Fatalf("A's acquire of a free lock: %d, want 0", v)
	}
	if v := run("B"); v <= 0 || v > 5000 {
		t.Fatalf("B's acquire of A's lock: %d, want A's PTTL", v)
	}
	if v := run("A"); v != 0 {
		t.Fatalf("A's re-entry: %d, want 0", v)
	}
	// Granted at a quorum: the last master may apply it a moment later.
	waitFor(t, func() bool {
		for _, n := range counts("A") {
			if n != "2" {
				return false
			}
		}
		return true
	}, "A's count 2 on every master")
	for i, n := range counts("B") {
		if n != "(nil)" {
			t.Errorf("master %d holds B's count %s after B's refusal, want none", i, n)
		}
	}
	// go-redisson's Mutex: tokenless, 0 or the holder's PTTL.
	mutex := redis.NewScript(`
if (redis.call('exists', KEYS[1]) == 0) then
	redis.call('set', KEYS[1], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return 0;
end;
return redis.call('pttl', KEYS[1]);`)
	for i, want := range []string{"0", "held"} {
		v, err := mutex.Run(ctx, a, []string{"mx"}, "5000").Int64()
		switch {
		case err != nil:
			t.Fatalf("mutex acquire %d: %v", i+1, err)
		case want == "0" && v != 0, want == "held" && (v <= 0 || v > 5000):
			t.Fatalf("mutex acquire %d: %d, want %s", i+1, v, want)
		}
	}
}
