package proxy_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestModeArgumentLock: redlock-rb's lock script, whose ARGV[3] says
// whether a free key may be taken ("yes", a lock call) or only the caller's
// own lock re-set ("no", an extend call), runs through lockproxy (it was
// refused: the probes saw only the extend mode). The lock call takes a
// free lock and is refused one another holds; the extend call moves the
// caller's TTL on the masters, answers nil for a stranger, and after the
// release answers nil without taking the free key.
func TestModeArgumentLock(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := context.Background()
	a := c.client()
	lock := redis.NewScript(`if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
end`)
	release := redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)
	on := func(cmd string) []string {
		out := make([]string, len(c.masters))
		for i, m := range c.masters {
			out[i], _ = m.Do(cmd, "rb")
		}
		return out
	}
	onEvery := func(want string, what string) {
		waitFor(t, func() bool {
			for _, v := range on("GET") {
				if v != want {
					return false
				}
			}
			return true
		}, what)
	}
	if v, err := lock.Run(ctx, a, []string{"rb"}, "tokA", "5000", "yes").Text(); err != nil || v != "OK" {
		t.Fatalf("A's lock call on a free key: %q, %v; want OK", v, err)
	}
	if v, err := lock.Run(ctx, a, []string{"rb"}, "tokB", "5000", "yes").Text(); err != redis.Nil {
		t.Fatalf("B's lock call on A's lock: %q, %v; want nil", v, err)
	}
	if v, err := lock.Run(ctx, a, []string{"rb"}, "tokB", "30000", "no").Text(); err != redis.Nil {
		t.Fatalf("B's extend call on A's lock: %q, %v; want nil", v, err)
	}
	onEvery("tokA", "A's lock on every master after B's calls")
	if v, err := lock.Run(ctx, a, []string{"rb"}, "tokA", "30000", "no").Text(); err != nil || v != "OK" {
		t.Fatalf("A's extend call: %q, %v; want OK", v, err)
	}
	waitFor(t, func() bool {
		for _, v := range on("PTTL") {
			if n, _ := strconv.Atoi(v); n <= 5000 {
				return false
			}
		}
		return true
	}, "A's extend on every master (PTTL above the 5000 ms it was taken with)")
	if n, err := release.Run(ctx, a, []string{"rb"}, "tokA").Int(); err != nil || n != 1 {
		t.Fatalf("A's release: %d, %v; want 1", n, err)
	}
	onEvery("(nil)", "the lock gone from every master")
	if v, err := lock.Run(ctx, a, []string{"rb"}, "tokA", "30000", "no").Text(); err != redis.Nil {
		t.Fatalf("A's extend call after its release: %q, %v; want nil", v, err)
	}
	onEvery("(nil)", "no master holding the key after an extend call on a free key")
	if v, err := lock.Run(ctx, a, []string{"rb"}, "tokB", "5000", "yes").Text(); err != nil || v != "OK" {
		t.Fatalf("B's lock call after A's release: %q, %v; want OK", v, err)
	}
	onEvery("tokB", "B's lock on every master")
}
