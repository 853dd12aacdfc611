package proxy_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestYesStringAcquire: understood scripts that answer their token on a
// grant and on a release run through lockproxy (they were refused: their
// yes rule was the probe's text). The client hears its token when the lock
// is its own on a quorum, nil when another holds it; a stranger's release
// leaves the lock on every master.
func TestYesStringAcquire(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := context.Background()
	a := c.client()
	acquire := redis.NewScript(`if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return ARGV[1] end return nil`)
	release := redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) return ARGV[1] end return nil`)
	values := func() []string {
		out := make([]string, len(c.masters))
		for i, m := range c.masters {
			out[i], _ = m.Do("GET", "ys")
		}
		return out
	}
	if v, err := acquire.Run(ctx, a, []string{"ys"}, "tokA", "5000").Text(); err != nil || v != "tokA" {
		t.Fatalf("A's acquire of a free lock: %q, %v; want tokA", v, err)
	}
	if v, err := acquire.Run(ctx, a, []string{"ys"}, "tokB", "5000").Text(); err != redis.Nil {
		t.Fatalf("B's acquire of A's lock: %q, %v; want nil", v, err)
	}
	if v, err := release.Run(ctx, a, []string{"ys"}, "tokB").Text(); err != redis.Nil {
		t.Fatalf("B's release of A's lock: %q, %v; want nil", v, err)
	}
	waitFor(t, func() bool {
		for _, v := range values() {
			if v != "tokA" {
				return false
			}
		}
		return true
	}, "A's lock on every master after B's acquire and release")
	if v, err := release.Run(ctx, a, []string{"ys"}, "tokA").Text(); err != nil || v != "tokA" {
		t.Fatalf("A's release: %q, %v; want tokA", v, err)
	}
	waitFor(t, func() bool {
		for _, v := range values() {
			if v != "(nil)" {
				return false
			}
		}
		return true
	}, "the lock gone from every master")
}
