package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fencing tokens through lockproxy (docs/fencing.md): INCR and INCRBY on
// counters, the fenced acquire script, and a protected resource that
// rejects a paused holder's stale writes.

// fencedAcquire is the documented one-round-trip acquisition with a
// fencing token: the token (> 0) when acquired, else 0. Against one Redis
// it is a plain INCR; through lockproxy the grant answers the quorum
// max-register's value instead.
const fencedAcquire = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`

func TestCounterCommands(t *testing.T) {
	c := startCluster(t, 3)
	cl := c.client()
	ctx := context.Background()
	for i, want := range []int64{1, 2, 3} {
		if v, err := cl.Incr(ctx, "n").Result(); err != nil || v != want {
			t.Fatalf("INCR %d: %d %v", i, v, err)
		}
	}
	if v, err := cl.IncrBy(ctx, "n", 10).Result(); err != nil || v != 13 {
		t.Fatalf("INCRBY 10: %d %v", v, err)
	}
	if v, err := cl.IncrBy(ctx, "n", 0).Result(); err != nil || v != 13 {
		t.Fatalf("INCRBY 0: %d %v", v, err)
	}
	if v, err := cl.Get(ctx, "n").Result(); err != nil || v != "13" {
		t.Fatalf("GET of a counter: %q %v", v, err)
	}
	// Answered once a quorum acknowledged; the last master follows.
	deadline := time.Now().Add(5 * time.Second)
	for vals := c.onMasters("n"); count(vals, "13") != 3; vals = c.onMasters("n") {
		if time.Now().After(deadline) {
			t.Fatalf("masters hold %v, want 13 everywhere", vals)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if ok, err := cl.SetNX(ctx, "lock", "tok", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	for _, tc := range []struct {
		cmd  []any
		want string
	}{
		{[]any{"INCR", "lock"}, "ERR value is not an integer or out of range"},
		{[]any{"INCRBY", "n", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"INCRBY", "n", "-1"}, "ERR lockproxy counters only go up"},
		{[]any{"DECR", "n"}, "ERR lockproxy counters only go up"},
		{[]any{"DECRBY", "n", "1"}, "ERR lockproxy counters only go up"},
		{[]any{"INCRBY", "n", "9223372036854775807"}, "ERR increment or decrement would overflow"},
		{[]any{"INCR"}, "ERR wrong number of arguments for 'incr' command"},
		{[]any{"INCRBYFLOAT", "n", "1.5"}, "ERR unknown or unsupported command 'INCRBYFLOAT'"},
	} {
		err := cl.Do(ctx, tc.cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.cmd, err, tc.want)
		}
	}
	if v, err := cl.Get(ctx, "lock").Result(); err != nil || v != "tok" {
		t.Fatalf("the lock after INCR was refused: %q %v", v, err)
	}
	// PEXPIRE extends locks only: a counter that expired would start over.
	if ok, err := cl.PExpire(ctx, "n", time.Second).Result(); ok || err != nil {
		t.Fatalf("PEXPIRE of a counter: %v %v, want 0", ok, err)
	}
	if ok, err := cl.PExpire(ctx, "lock", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("PEXPIRE of a lock: %v %v", ok, err)
	}
	if v, err := cl.Incr(ctx, "n").Result(); err != nil || v != 14 {
		t.Fatalf("INCR after PEXPIRE was refused: %d %v", v, err)
	}
	if m := c.scrape(); !strings.Contains(m, `lockproxy_requests_total{op="counter",outcome="ok"} 6`) ||
		!strings.Contains(m, `lockproxy_requests_total{op="counter",outcome="error"} 6`) {
		t.Errorf("counter metrics: %s", grepLines(m, `op="counter"`))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestFencedAcquire: the fenced acquire script answers the quorum's
// maximum plus one, not one master's INCR, and 0 while the lock is held.
func TestFencedAcquire(t *testing.T) {
	c := startCluster(t, 3)
	cl := c.client()
	ctx := context.Background()
	// The masters' counters differ: 100 was acknowledged by a quorum,
	// master 2 missed it.
	c.masters[0].Do("SET", "k:fence", "100")
	c.masters[1].Do("SET", "k:fence", "100")
	c.masters[2].Do("SET", "k:fence", "7")
	s := redis.NewScript(fencedAcquire)
	tok, err := s.Run(ctx, cl, []string{"k", "k:fence"}, "a", 10000).Int64()
	if err != nil || tok <= 100 {
		t.Fatalf("fenced acquire over counters 100, 100, 7: %d %v, want > 100", tok, err)
	}
	if held, err := s.Run(ctx, cl, []string{"k", "k:fence"}, "b", 10000).Int64(); err != nil || held != 0 {
		t.Fatalf("fenced acquire of a held lock: %d %v, want 0", held, err)
	}
	cl.Del(ctx, "k")
	next, err := s.Run(ctx, cl, []string{"k", "k:fence"}, "b", 10000).Int64()
	if err != nil || next <= tok {
		t.Fatalf("next fenced acquire: %d %v, want > %d", next, err, tok)
	}
	if v, err := cl.Incr(ctx, "k:fence").Result(); err != nil || v <= next {
		t.Fatalf("INCR after the fenced acquisitions: %d %v, want > %d", v, err, next)
	}
}

// fencedStore is the protected resource of the paused-holder scenario: it
// remembers the highest token it has seen and rejects writes with a lower
// one.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	value   string
}

func (s *fencedStore) write(token int64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("stale token %d: %d seen", token, s.highest)
	}
	s.highest, s.value = token, v
	return nil
}

// TestPausedHolderIsFenced: holder A acquires with token t1 and pauses
// past its validity; B acquires with t2 > t1 and writes; A resumes and
// writes with t1: the resource rejects it. Through two proxies, with both
// ways of getting the token: INCR right after SET NX (unchanged clients)
// and the fenced acquire script (one round trip).
func TestPausedHolderIsFenced(t *testing.T) {
	ms := startCluster(t, 3).masters
	a := startFront(t, ms, false, proxySettings{maxTTL: time.Minute}.opt())
	b := startFront(t, ms, false, proxySettings{maxTTL: time.Minute}.opt())
	a.waitVoting(3)
	b.waitVoting(3)
	ca, cb := a.client(), b.client()
	ctx := context.Background()
	acquireWithIncr := func(cl *redis.Client, key, tok string) int64 {
		if ok, err := cl.SetNX(ctx, key, tok, 300*time.Millisecond).Result(); !ok || err != nil {
			t.Fatalf("SET NX %s: %v %v", key, ok, err)
		}
		v, err := cl.Incr(ctx, key+":fence").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	acquireFenced := func(cl *redis.Client, key, tok string) int64 {
		v, err := redis.NewScript(fencedAcquire).Run(ctx, cl, []string{key, key + ":fence"}, tok, 300).Int64()
		if err != nil || v == 0 {
			t.Fatalf("fenced acquire %s: %d %v", key, v, err)
		}
		return v
	}
	for name, acquire := range map[string]func(*redis.Client, string, string) int64{"incr": acquireWithIncr, "script": acquireFenced} {
		t.Run(name, func(t *testing.T) {
			store := &fencedStore{}
			key := "resource:" + name
			t1 := acquire(ca, key, "A")
			// A pauses (a GC, a swapped-out process) past its validity; B,
			// through the other proxy, gets the lock when it expires.
			var t2 int64
			deadline := time.Now().Add(5 * time.Second)
			for t2 == 0 && time.Now().Before(deadline) {
				if ok, _ := cb.Exists(ctx, key).Result(); ok == 0 {
					t2 = acquire(cb, key, "B")
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if t2 <= t1 {
				t.Fatalf("B's token %d, A's %d: want greater", t2, t1)
			}
			if err := store.write(t2, "B's data"); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			// A resumes and writes, believing it still holds the lock.
			if err := store.write(t1, "A's stale data"); err == nil {
				t.Fatalf("the resource took A's write with token %d after B's %d", t1, t2)
			}
			if store.value != "B's data" {
				t.Fatalf("resource holds %q", store.value)
			}
			t.Logf("A's token %d rejected after B's %d", t1, t2)
		})
	}
}

// TestCounterAfterMajorityLoss: a majority restarted empty has lost
// what the counters were; they answer NOQUORUM, naming why, rather than a
// value that may have gone back, while locks come back after the
// quarantine.
func TestCounterAfterMajorityLoss(t *testing.T) {
	c := startCluster(t, 3, withQuarantine(500*time.Millisecond))
	c.waitVoting(3)
	cl := c.client()
	ctx := context.Background()
	if _, err := cl.IncrBy(ctx, "n", 5).Result(); err != nil {
		t.Fatal(err)
	}
	restartEmpty(t, c.masters[:2])
	c.waitVoting(3) // the lock quarantine ends
	if ok, err := cl.SetNX(ctx, "lock", "t", 400*time.Millisecond).Result(); !ok || err != nil {
		t.Fatalf("SET NX after the quarantine: %v %v", ok, err)
	}
	_, err := cl.Incr(ctx, "n").Result()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") || !strings.Contains(err.Error(), "counters are not restored") {
		t.Fatalf("INCR after a majority lost its data: %v, want NOQUORUM naming the repair", err)
	}
	q := info(t, cl, "quorum")
	if q["master0.counters"] != "pending" || q["master1.counters"] != "pending" || q["master2.counters"] != "ok" || q["masters_counters_pending"] != "2" {
		t.Errorf("INFO quorum: master0 %q, master1 %q, master2 %q, pending %q; want pending, pending, ok, 2",
			q["master0.counters"], q["master1.counters"], q["master2.counters"], q["masters_counters_pending"])
	}
}

// redissonFencedTryLock is Redisson 4's RFencedLock.tryLockInnerAsync
// (tryLockAndGetToken): each master increments its own token counter
// (KEYS[2]) and answers {-1, token} on a grant, {pttl, -1} when held.
const redissonFencedTryLock = "if (redis.call('exists', KEYS[1]) == 0 " +
	"or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
	"local token = redis.call('incr', KEYS[2]);" +
	"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
	"redis.call('pexpire', KEYS[1], ARGV[1]); " +
	"return {-1, token}; " +
	"end; " +
	"return {redis.call('pttl', KEYS[1]), -1};"

// TestRedissonFencedLockTokens: Redisson's RFencedLock gets its token in
// the second element of the yes reply. Through lockproxy that element is
// the quorum's max-register increment, not one master's counter: with
// master 0 cut off (its counter ahead) and masters 1 and 2 behind the
// token a quorum acknowledged, the next holder's token still follows it.
// Before, the client got the first master's INCR, 6 after 101: an expired
// holder's writes with 101 would have won over the new holder's.
func TestRedissonFencedLockTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	c, relays := startRelayed(t, 3)
	a, b := c.client(), c.client()
	s := redis.NewScript(redissonFencedTryLock)
	keys := []string{ops.name, "redisson_lock_token:{" + ops.name + "}"}
	c.masters[0].Do("SET", keys[1], "100")
	c.masters[1].Do("SET", keys[1], "100")
	c.masters[2].Do("SET", keys[1], "5")
	tryLock := func(cl *redis.Client, tok string) []int64 {
		t.Helper()
		v, err := s.Run(ctx, cl, keys, 30000, tok).Int64Slice()
		if err != nil || len(v) != 2 {
			t.Fatalf("RFencedLock tryLock: %v %v", v, err)
		}
		return v
	}
	first := tryLock(a, "uuidA:1")
	if first[0] != -1 || first[1] <= 100 {
		t.Fatalf("first lock over counters 100, 100, 5: %v, want [-1 >100]", first)
	}
	if held := tryLock(b, "uuidB:1"); held[0] <= 0 || held[1] != -1 {
		t.Fatalf("B while A holds: %v, want [pttl -1]", held)
	}
	if u, err := ops.unlockOnce(ctx, a, "uuidA:1"); err != nil || u != "1" {
		t.Fatalf("A's unlock: %s %v", u, err)
	}
	// Master 1 falls behind the token a quorum acknowledged, and master
	// 0, which has it, is cut off.
	c.masters[1].Do("SET", keys[1], "5")
	c.partition(relays, 0)
	next := tryLock(b, "uuidB:1")
	if next[0] != -1 || next[1] <= first[1] {
		t.Fatalf("B's lock after A's token %d: %v, want a token above it", first[1], next)
	}
}
