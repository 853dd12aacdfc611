package proxy_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// builtinBody is the text of the built-in script with this name.
func builtinBody(t testing.TB, name string) string {
	t.Helper()
	cat, err := catalog.New(nil)
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
			// 0 is "no expiry" to many lock scripts (Medusa's acquire
			// without expire): said so, not "too short".
			{[]any{"EVAL", acquire, "1", "short", "t", "0"}, []string{`ERR script "node-redlock v3 acquire": ARGV[2] is 0, and lockproxy takes a lock only with a TTL`, "pass a TTL in ms"}},
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
		// The shortest accepted TTL reaches the masters (granted, or not
		// when they answer later than its validity of about 1ms, or the
		// validity ran out before the command was written on a busy
		// machine: NOQUORUM saying so), and so does EX 1.
		if err := cl.Do(ctx, "SET", "short3", "t", "NX", "PX", "3").Err(); err != nil && err.Error() != "redis: nil" &&
			!strings.Contains(err.Error(), "no reply before the lock's validity") &&
			!strings.Contains(err.Error(), "deadline passed before the command was written") &&
			!strings.Contains(err.Error(), "past its validity") {
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

func mustCatalog(t testing.TB) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.New(nil)
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

// Force acquisition (rueidislock's fcqms and fcqat: SET without NX, over
// any holder) is the library's feature, allowed by default; an operator
// switches it off with allow_force_acquire = false (Config.DenyForce), and
// then EVAL and EVALSHA of such a script are refused, naming the script
// and the key, while the rest of the catalog and custom scripts marked
// force follow the same rule.
func TestForceAcquireSwitch(t *testing.T) {
	fcqms := builtinBody(t, "rueidislock fcqms")
	fcqat := builtinBody(t, "rueidislock fcqat")
	acqms := builtinBody(t, "rueidislock acqms")
	custom := catalog.ScriptConfig{Name: "my force", Body: `return redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])`,
		Kind: "acquire", Vote: "ok", TTLArg: 2, TTLUnit: "ms", TokenArg: 1, Force: true}
	withCustom := func(pc *proxy.Config, qc *quorum.Config) {
		cat, err := catalog.New([]catalog.ScriptConfig{custom})
		if err != nil {
			t.Fatal(err)
		}
		pc.Catalog = cat
		qc.Scripts = append(qc.Scripts, custom.Body)
	}
	deny := func(pc *proxy.Config, _ *quorum.Config) { pc.DenyForce = true }
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		ctx := context.Background()
		allowed := start(t, 3, withCustom)
		cl := allowed.client()
		if ok, err := cl.SetNX(ctx, "f", "holder", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		if err := cl.Do(ctx, "EVAL", fcqms, "1", "f", "forcer", "10000").Err(); err != nil {
			t.Fatalf("fcqms allowed by default: %v", err)
		}
		// A quorum answered; the third master may still be running it.
		waitFor(t, func() bool { return count(allowed.onMasters("f"), "forcer") == 3 }, "the forced acquisition on every master")

		denied := start(t, 3, withCustom, deny)
		cl = denied.client()
		if ok, err := cl.SetNX(ctx, "f", "holder", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		before := commandStats(denied)
		at := fmt.Sprint(time.Now().Add(10 * time.Second).UnixMilli())
		for _, tc := range []struct {
			name string
			args []any
		}{
			{"rueidislock fcqms", []any{"EVAL", fcqms, "1", "f", "forcer", "10000"}},
			{"rueidislock fcqms", []any{"EVALSHA", sha1hex(fcqms), "1", "f", "forcer", "10000"}},
			{"rueidislock fcqat", []any{"EVAL", fcqat, "1", "f", "forcer", at}},
			{"my force", []any{"EVAL", custom.Body, "1", "f", "forcer", "10000"}},
		} {
			err := cl.Do(ctx, tc.args...).Err()
			want := fmt.Sprintf("ERR script %q takes the lock whoever holds it (force acquisition), and force acquisition is switched off: allow_force_acquire = false in config.toml", tc.name)
			if err == nil || err.Error() != want {
				t.Errorf("%s %s: %v, want %q", tc.args[0], tc.name, err, want)
			}
		}
		if after := commandStats(denied); after != before {
			t.Fatalf("masters saw commands:\nbefore %s\nafter  %s", before, after)
		}
		if got := denied.onMasters("f"); count(got, "holder") != 3 {
			t.Fatalf("the holder lost its lock: %q", got)
		}
		// Ordinary acquisition is not affected.
		if err := cl.Do(ctx, "EVAL", acqms, "1", "g", "t", "10000").Err(); err != nil {
			t.Fatalf("acqms with force switched off: %v", err)
		}
	})
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Large commands (over 4 KiB) a master has not answered are bounded per
// master (quorum.MaxBigInFlight): every master runs its connection's
// commands in order, and 20 clients pipelining SET NX of 1 MiB keys held
// another client's SET NX for about a second, 60% of them NOQUORUM. A
// master without room is not sent the next large command (a paused master
// only loses its own votes); with fewer than a quorum with room, the
// command is refused, naming the limit. Small commands are never held to
// it, and the room comes back once the masters answer.
func TestLargeCommandsInFlightBounded(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	big := func(i int) string { return fmt.Sprintf("%d%s", i, strings.Repeat("k", 1<<20-8)) }
	paused := map[int]bool{}
	pause := func(i int) {
		if err := c.masters[i].Pause(); err != nil {
			t.Fatal(err)
		}
		paused[i] = true
	}
	defer func() {
		for i := range paused {
			c.masters[i].Resume()
		}
	}()
	// A paused master keeps the first large command unanswered; the
	// second is not sent there, and the other two grant it.
	pause(2)
	for _, i := range []int{1, 2} {
		if err := cl.SetNX(ctx, big(i), "t", 10*time.Second).Err(); err != nil {
			t.Fatalf("large SET NX %d with one master paused: %v", i, err)
		}
	}
	if ok, err := cl.SetNX(ctx, "small", "t", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("small SET NX: %v %v", ok, err)
	}
	// With a second master paused, too few have room: refused, unsent.
	pause(1)
	if err := cl.SetNX(ctx, big(3), "t", 10*time.Second).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("large SET NX %d with two masters paused: %v, want NOQUORUM", 3, err)
	}
	err := cl.SetNX(ctx, big(4), "t", 10*time.Second).Err()
	if err == nil || !strings.Contains(err.Error(), "on too many masters the commands over 4096 bytes waiting would pass lockproxy's limit of 2097152 bytes") {
		t.Fatalf("large SET NX while two masters have one unanswered: %v; want refused at the limit", err)
	}
	for i := range paused {
		if err := c.masters[i].Resume(); err != nil {
			t.Fatal(err)
		}
		delete(paused, i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cl.SetNX(ctx, big(5), "t", 10*time.Second).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("large SET NX once the masters answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := c.masters[2].Do("EXISTS", big(2)); err != nil || got != "0" {
		t.Errorf("master 2 has the large key it had no room for: EXISTS %v %v", got, err)
	}
	info, err := cl.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "large_commands_refused:") || strings.Contains(info, "large_commands_refused:0\r\n") {
		t.Errorf("INFO stats: want large_commands_refused counted in\n%s", info)
	}
}
