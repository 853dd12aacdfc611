package proxy_test

import (
	"context"
	"fmt"
	"strconv"
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

// Every TTL that reaches a master is bounded by max_ttl, whatever carries
// it: python-redis-lock's unlock and reset PEXPIRE their signal list
// KEYS[2] with ARGV[2], and 2,592,000,000 ms left a 30-day key on every
// master. Now refused with the max_ttl error, and nothing runs.
func TestScriptOtherTTLsBoundedByMaxTTL(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3)
		ctx := context.Background()
		cl := c.client()
		unlock := builtinBody(t, "python-redis-lock unlock")
		reset := builtinBody(t, "python-redis-lock reset")
		if ok, err := cl.SetNX(ctx, "lock:x", "tok", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		for _, tc := range []struct {
			args []any
			want string
		}{
			{[]any{"EVAL", unlock, "2", "lock:x", "lock-signal:x", "tok", "2592000000"},
				`ERR script "python-redis-lock unlock": ARGV[2]: TTL 2592000000ms exceeds max_ttl 1m0s (quorum.max_ttl in config.toml)`},
			{[]any{"EVAL", reset, "2", "lock:x", "lock-signal:x", "tok", "2592000000"},
				`ERR script "python-redis-lock reset": ARGV[2]: TTL 2592000000ms exceeds max_ttl`},
			{[]any{"EVAL", unlock, "2", "lock:x", "lock-signal:x", "tok", "0"}, `ARGV[2]: invalid expire time 0: a TTL must be positive`},
			{[]any{"EVAL", unlock, "2", "lock:x", "lock-signal:x", "tok", "soon"}, `ARGV[2] should be a TTL in ms, an integer`},
			{[]any{"EVAL", unlock, "2", "lock:x", "lock-signal:x", "tok"}, `expects a TTL in ARGV[2], but only 1 ARGV were given`},
		} {
			err := cl.Do(ctx, tc.args...).Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%.60q: %v, want %q", tc.args[2:], err, tc.want)
			}
		}
		for i, m := range c.masters {
			if v, err := m.Do("PTTL", "lock-signal:x"); err != nil || v != "-2" {
				t.Errorf("master %d: PTTL of the signal list = %s %v, want -2 (no key)", i, v, err)
			}
		}
		// Within max_ttl it runs: released, and the signal list expires.
		if n, err := cl.Do(ctx, "EVAL", unlock, "2", "lock:x", "lock-signal:x", "tok", "1000").Int(); err != nil || n != 0 {
			t.Fatalf("unlock within max_ttl: %v %v, want 0 (released)", n, err)
		}
		for i, m := range c.masters {
			v, err := m.Do("PTTL", "lock-signal:x")
			if ms, _ := strconv.Atoi(v); err != nil || ms <= 0 || ms > 1000 {
				t.Errorf("master %d: PTTL of the signal list = %s %v, want 1..1000", i, v, err)
			}
		}
	})
}
