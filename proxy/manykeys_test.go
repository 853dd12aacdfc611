package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestCommandKeysBounded: DEL, EXISTS and scripts name at most 1,024 keys
// through lockproxy. Every master runs such a command at once, and a
// reviewer's DEL of 65,535 keys kept each one busy past node_timeout, so
// other clients' locks failed with NOQUORUM; a node-redlock acquire of
// 65,000 keys held the event loop for 25 s. One key more is refused with a
// reason before anything is sent; 1,024 still work.
func TestCommandKeysBounded(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	keys := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("many:%d", i)
		}
		return out
	}
	if n, err := cl.Exists(ctx, keys(1024)...).Result(); err != nil {
		t.Fatalf("EXISTS of 1024 keys: %v %v", n, err)
	}
	if n, err := cl.Del(ctx, keys(1024)...).Result(); err != nil {
		t.Fatalf("DEL of 1024 keys: %v %v", n, err)
	}
	release := `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"DEL", func() error { return cl.Del(ctx, keys(1025)...).Err() }},
		{"UNLINK", func() error { return cl.Unlink(ctx, keys(1025)...).Err() }},
		{"EXISTS", func() error { return cl.Exists(ctx, keys(1025)...).Err() }},
		{"EVAL", func() error { return cl.Eval(ctx, release, keys(1025), "tok").Err() }},
	} {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), "names at most 1024 keys (got 1025)") {
			t.Errorf("%s of 1025 keys: %v, want the keys' limit named", tc.name, err)
		}
	}
}
