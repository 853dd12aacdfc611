package proxy_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Batch scripts through lockproxy (batchcmds.go): Redisson 4's renewChunk,
// one quorum extend per key, answered side by side.

func renewChunkScript(t *testing.T) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("analyze/testdata/corpus/redisson-4.x_renewChunk.lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// pttls reads key's PTTL on every master.
func (c *cluster) pttls(key string) []int64 {
	out := make([]int64, len(c.masters))
	for i, m := range c.masters {
		v, _ := m.Do("PTTL", key)
		out[i], _ = strconv.ParseInt(v, 10, 64)
	}
	return out
}

// TestRenewChunkRenewsEachLockByQuorum: one call renews A's two locks, not
// B's, not a free one, and not one only a minority of masters holds for A
// (which one Redis among them would have renewed): each key is its own
// quorum decision, and the reply has one element per key in order.
func TestRenewChunkRenewsEachLockByQuorum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	renew := renewChunkScript(t)
	c := startCluster(t, 3)
	a, bc := c.client(), c.client()
	const tokA, tokB = "uuidA:1", "uuidB:1"
	lock := func(cl *redis.Client, key, tok string) {
		t.Helper()
		if _, err := ops.try.Run(ctx, cl, []string{key}, "2000", tok).Result(); err != redis.Nil {
			t.Fatalf("lock %s for %s: %v", key, tok, err)
		}
	}
	lock(a, "l1", tokA)
	lock(a, "l2", tokA)
	lock(bc, "l3", tokB)
	// l5: A's on master 0 only, as a grant that missed the quorum leaves it.
	if _, err := c.masters[0].Do("HSET", "l5", tokA, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.masters[0].Do("PEXPIRE", "l5", "2000"); err != nil {
		t.Fatal(err)
	}
	keys := []string{"l1", "l3", "l4", "l2", "l5"}
	got, err := renew.Run(ctx, a, keys, "30000", tokA, tokA, tokA, tokA, tokA).Int64Slice()
	if err != nil {
		t.Fatalf("renewChunk: %v", err)
	}
	if want := []int64{1, 0, 0, 1, 0}; !equalInts(got, want) {
		t.Fatalf("renewChunk over %v answered %v, want %v", keys, got, want)
	}
	for _, k := range []string{"l1", "l2"} {
		for i, p := range c.pttls(k) {
			if p <= 2000 {
				t.Errorf("%s on master %d: PTTL %d after its renewal to 30000 ms", k, i, p)
			}
		}
	}
	for i, p := range c.pttls("l3") {
		if p > 2000 {
			t.Errorf("B's l3 on master %d renewed by A's call: PTTL %d", i, p)
		}
	}
	// The tokens are per key: A's call with B's token in l3's place renews it.
	got, err = renew.Run(ctx, a, []string{"l1", "l3"}, "30000", tokA, tokB).Int64Slice()
	if err != nil || !equalInts(got, []int64{1, 1}) {
		t.Fatalf("renewChunk with each key's own token: %v, %v; want [1 1]", got, err)
	}
}

// TestRenewChunkCallErrors: calls a batch cannot split are refused with
// what to fix, and send nothing.
func TestRenewChunkCallErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	renew := renewChunkScript(t)
	c := startCluster(t, 3)
	cl := c.client()
	if err := renew.Load(ctx, cl).Err(); err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
	many := make([]string, 129)
	manyArgs := []any{"30000"}
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
		manyArgs = append(manyArgs, "t")
	}
	for _, tc := range []struct {
		keys []string
		args []any
		want string
	}{
		{[]string{"a", "b"}, []any{"30000", "t"}, "takes 3 ARGV with 2 KEYS"},
		{[]string{"a", "a"}, []any{"30000", "t", "t"}, "KEYS[2] repeats KEYS[1]"},
		{nil, []any{"30000"}, "was given no KEYS"},
		{many, manyArgs, "at most 128 per call"},
		{[]string{"a", "b"}, []any{"99999999999", "t", "t"}, "max_ttl"},
	} {
		err := renew.EvalSha(ctx, cl, tc.keys, tc.args...).Err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("renewChunk over %d keys, ARGV %v: %v; want an error saying %q", len(tc.keys), tc.args[:min(3, len(tc.args))], err, tc.want)
		}
	}
	for i, m := range c.masters {
		if n, _ := m.Do("DBSIZE"); n != "0" {
			t.Errorf("master %d holds %s keys after refused calls", i, n)
		}
	}
}

// TestRenewChunkNoQuorum: with 2 of 3 masters cut off, the call fails as a
// whole with NOQUORUM: no element a watchdog could take for a renewal.
func TestRenewChunkNoQuorum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	renew := renewChunkScript(t)
	c, relays := startRelayed(t, 3)
	a := c.client()
	for _, k := range []string{"l1", "l2"} {
		if _, err := ops.try.Run(ctx, a, []string{k}, "30000", "tokA").Result(); err != redis.Nil {
			t.Fatal(err)
		}
	}
	c.partition(relays, 1)
	c.partition(relays, 2)
	err := renew.Run(ctx, a, []string{"l1", "l2"}, "30000", "tokA", "tokA").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("renewChunk with 1 of 3 masters: %v; want NOQUORUM", err)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
