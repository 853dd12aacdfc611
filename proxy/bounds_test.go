package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// builtinBody is the text of the built-in script with this name.
func builtinBody(t testing.TB, name string) string {
	t.Helper()
	cat, err := proxy.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cat.Scripts() {
		if s.Name == name {
			return s.Body
		}
	}
	t.Fatalf("no built-in script %q", name)
	return ""
}

// A TTL so short that the drift allowance (2ms + 1%) leaves no validity
// could never be granted: before, SET NX PX 1 and PX 2 answered nil
// ("held") forever, even on a free key. Every accounted TTL is an error
// that says so and names the minimum, and nothing reaches a master.
func TestTTLTooShortForValidity(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3)
		ctx := context.Background()
		cl := c.client()
		before := commandStats(c)
		nowMs := time.Now().UnixMilli()
		acquire := builtinBody(t, "node-redlock v3 acquire")
		acqat := builtinBody(t, "rueidislock acqat")
		for _, tc := range []struct {
			args []any
			want []string
		}{
			{[]any{"SET", "short", "t", "NX", "PX", "1"}, []string{"ERR TTL 1ms is too short", "clock_drift_factor 0.01", "the minimum is 3ms"}},
			{[]any{"SET", "short", "t", "PX", "2", "NX"}, []string{"ERR TTL 2ms is too short", "the minimum is 3ms"}},
			{[]any{"SET", "short", "t", "NX", "PXAT", fmt.Sprint(nowMs - 1000)}, []string{"(an absolute expiry in the past) is too short", "the minimum is 3ms"}},
			{[]any{"SET", "short", "t", "NX", "EXAT", fmt.Sprint(nowMs/1000 - 10)}, []string{"in the past) is too short"}},
			{[]any{"PEXPIRE", "short", "2"}, []string{"ERR TTL 2ms is too short", "the minimum is 3ms"}},
			{[]any{"EVAL", acquire, "1", "short", "t", "2"}, []string{`ERR script "node-redlock v3 acquire": ARGV[2]: TTL 2ms is too short`, "the minimum is 3ms"}},
			{[]any{"EVAL", acqat, "1", "short", "t", fmt.Sprint(nowMs)}, []string{`ERR script "rueidislock acqat": ARGV[2]: TTL`, "is too short"}},
		} {
			err := cl.Do(ctx, tc.args...).Err()
			if err == nil {
				t.Errorf("%.40q: no error", tc.args)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%.40q: %q lacks %q", tc.args, err, w)
				}
			}
		}
		if after := commandStats(c); after != before {
			t.Fatalf("masters saw commands:\nbefore %s\nafter  %s", before, after)
		}
		// The shortest accepted TTL reaches the masters (granted or not,
		// by how fast they answer), and so does EX 1.
		if err := cl.Do(ctx, "SET", "short3", "t", "NX", "PX", "3").Err(); err != nil && err.Error() != "redis: nil" {
			t.Fatalf("SET NX PX 3: %v", err)
		}
		if ok, err := cl.SetNX(ctx, "short1s", "t", time.Second).Result(); err != nil || !ok {
			t.Fatalf("SET NX EX 1: %v %v", ok, err)
		}
	})
}

func TestDefaultTTLTooShort(t *testing.T) {
	c := startCluster(t, 1)
	_, err := proxy.New(proxy.Config{Engine: c.engine, Catalog: mustCatalog(t), DefaultTTL: 2 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "default_ttl (2ms) leaves no validity") || !strings.Contains(err.Error(), "at least 3ms") {
		t.Fatalf("New with default_ttl 2ms: %v", err)
	}
}

func mustCatalog(t testing.TB) *proxy.Catalog {
	t.Helper()
	cat, err := proxy.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}
