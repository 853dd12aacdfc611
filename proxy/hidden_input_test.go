package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Understood scripts whose behaviour depends on an input the analyzer's
// probes never varied (review, helper-58, "class A"): the number of ARGV
// or KEYS a call passes, the content of the lock key's name and of the
// token, the held lock's remaining TTL. Each was accepted and its verdict
// trusted for every call, and each gave a double grant. Each is now
// refused: at the call (a count the analysis never ran) or by the analyzer.

// refusedWith reports whether err is lockproxy's refusal containing
// want; any other error fails the test.
func refusedWith(t *testing.T, err error, want string) bool {
	t.Helper()
	if err == nil {
		return false
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q; want a refusal saying %q", err, want)
	}
	t.Logf("refused: %v", err)
	return true
}

// An optional unit argument read only when #ARGV >= 3: analyzed with two
// ARGV as "TTL ARGV[2] seconds", a call passing 'ms' set the lock for
// ARGV[2] milliseconds on every master while the proxy granted seconds.
const optionalUnitScript = `-- KEYS[1] lock, ARGV[1] token, ARGV[2] TTL in seconds; optional ARGV[3] = 'ms': the TTL is in milliseconds
if #ARGV >= 3 and ARGV[3] == 'ms' then
  return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'ex', ARGV[2])`

func TestUnderstoodScriptExtraArgvIsRefused(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	a, b := c.client(), c.client()
	// the analyzed count works
	if rep, err := a.Eval(ctx, optionalUnitScript, []string{"k0"}, "tokA", "30").Result(); err != nil || rep != "OK" {
		t.Fatalf("two ARGV: %v %v", rep, err)
	}
	rep, err := a.Eval(ctx, optionalUnitScript, []string{"k"}, "tokA", "30", "ms").Result()
	if refusedWith(t, err, "was understood from runs with 2 ARGV, but 3 were given") {
		return
	}
	if err != nil {
		t.Fatalf("A's EVAL: %v %v", rep, err)
	}
	t0 := time.Now()
	time.Sleep(100 * time.Millisecond)
	if ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result(); err == nil && ok {
		t.Fatalf("DOUBLE GRANT: B's SET NX got OK %v after A was granted k for 30 s (analyzed as TTL ARGV[2] seconds)", time.Since(t0))
	}
}

// A 'force' mode reached by passing one more ARGV: analyzed as a plain
// acquire, so allow_force_acquire = false did not stop it.
const extraArgvForceScript = `if #ARGV > 2 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`

func TestUnderstoodScriptExtraArgvCannotForce(t *testing.T) {
	c := startCluster(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.DenyForce = true })
	ctx := context.Background()
	a, b := c.client(), c.client()
	if ok, err := a.SetNX(ctx, "k", "tokA", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	rep, err := b.Eval(ctx, extraArgvForceScript, []string{"k"}, "tokB", "10000").Result()
	t.Logf("B two-ARGV: %v %v", rep, err)
	rep, err = b.Eval(ctx, extraArgvForceScript, []string{"k"}, "tokB", "10000", "force").Result()
	if refusedWith(t, err, "but 3 were given") {
		return
	}
	if err == nil && rep == "OK" {
		t.Fatalf("DOUBLE GRANT: B granted k while A holds it, with allow_force_acquire = false; masters %v", c.onMasters("k"))
	}
}

// The same with the number of KEYS: analyzed with 1 and 2 KEYS, a call
// with 3 took another branch (a 50 ms lock).
const thirdKeyScript = `if #KEYS > 2 then
  return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', 50)
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`

func TestUnderstoodScriptExtraKeysIsRefused(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	a, b := c.client(), c.client()
	if rep, err := a.Eval(ctx, thirdKeyScript, []string{"k0", "x"}, "tokA", "20000").Result(); err != nil || rep != "OK" {
		t.Fatalf("two KEYS: %v %v", rep, err)
	}
	rep, err := a.Eval(ctx, thirdKeyScript, []string{"k", "x1", "x2"}, "tokA", "20000").Result()
	if refusedWith(t, err, "was understood from runs with 1 and 2 KEYS, but 3 were given") {
		return
	}
	if err != nil {
		t.Fatalf("A's EVAL: %v %v", rep, err)
	}
	time.Sleep(150 * time.Millisecond)
	if ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result(); err == nil && ok {
		t.Fatalf("DOUBLE GRANT: B's SET NX got OK after A was granted k for 20 s")
	}
}

// Branches on the content of role arguments: the key's name, the token.
// The probes' keys and tokens are numbers of 13 digits; a realistic key
// name, a token with a given prefix or of a given length took a branch
// the analysis never ran.
func TestUnderstoodScriptKeyAndTokenContent(t *testing.T) {
	for _, s := range []struct {
		name, body, key, tokB string
	}{
		{"key name longer than 20 bytes", `if #KEYS[1] > 20 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "lock:orders:invoice-20261128", "tokB"},
		{"token prefix that is a script constant", `if string.sub(ARGV[1], 1, 6) == 'force:' then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "k", "force:tokB"},
		{"token of 40 bytes (a sha1 hex)", `if #ARGV[1] == 40 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "k", "0123456789abcdef0123456789abcdef01234567"},
		{"key with a hash tag that is a script constant: 10 ms lock", `if string.find(KEYS[1], '{short}', 1, true) then
  return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', 10)
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "{short}job", ""},
	} {
		t.Run(s.name, func(t *testing.T) {
			c := startCluster(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.DenyForce = true })
			ctx := context.Background()
			a, b := c.client(), c.client()
			if s.tokB == "" { // A takes it through the script, B by SET NX
				rep, err := a.Eval(ctx, s.body, []string{s.key}, "tokA", "20000").Result()
				if refusedWith(t, err, "unknown script") {
					return
				}
				if err != nil {
					t.Fatalf("A: %v %v", rep, err)
				}
				time.Sleep(100 * time.Millisecond)
				if ok, err := b.SetNX(ctx, s.key, "tokB", 10*time.Second).Result(); err == nil && ok {
					t.Fatalf("DOUBLE GRANT: B's SET NX granted while A holds %s", s.key)
				}
				return
			}
			if ok, err := a.SetNX(ctx, s.key, "tokA", 10*time.Second).Result(); err != nil || !ok {
				t.Fatalf("A: %v %v", ok, err)
			}
			rep, err := b.Eval(ctx, s.body, []string{s.key}, s.tokB, "10000").Result()
			if refusedWith(t, err, "unknown script") {
				return
			}
			if err == nil && rep == "OK" {
				t.Fatalf("DOUBLE GRANT: B granted %s while A holds it (allow_force_acquire = false); masters %v", s.key, c.onMasters(s.key))
			}
		})
	}
}

// A branch on the held lock's remaining TTL against a constant: probed
// with held keys that always had about 7,000,003 ms left, "take over a
// lease about to run out" was analyzed as a plain acquire, and took the
// lock while its holder's validity still had up to 1 s to run.
const stealNearlyExpiredScript = `if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return 1 end
if redis.call('pttl', KEYS[1]) < 1000 then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) return 1
end
return 0`

func TestUnderstoodScriptCannotStealNearlyExpiredLease(t *testing.T) {
	c := startCluster(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.DenyForce = true })
	ctx := context.Background()
	a, b := c.client(), c.client()
	const ttl = 3000 * time.Millisecond
	tSend := time.Now()
	if ok, err := a.SetNX(ctx, "k", "tokA", ttl).Result(); err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	validUntil := tSend.Add(ttl - time.Duration(float64(ttl)*0.01) - 2*time.Millisecond)
	time.Sleep(2200 * time.Millisecond)
	rep, err := b.Eval(ctx, stealNearlyExpiredScript, []string{"k"}, "tokB", "10000").Result()
	now := time.Now()
	if refusedWith(t, err, "unknown script") {
		return
	}
	if err == nil && rep == int64(1) && now.Before(validUntil) {
		t.Fatalf("DOUBLE GRANT: B granted k %v before A's validity ends; masters %v", validUntil.Sub(now), c.onMasters("k"))
	}
}

// simple-redis-mutex 1.4.0's acquire, as the library sends it: two KEYS
// (the lock, its FIFO counter) and three ARGV (value, timeout, FIFO id,
// empty without FIFO), of which the script reads two, and only as
// ARGV[1] and ARGV[2]. It cannot act otherwise on the count, so lockproxy runs it with
// the third argument; before, every call was refused ("understood from
// runs with 2 ARGV, but 3 were given") and the library could not lock.
const unreadThirdArgvScript = `
local lockKey = KEYS[1]
local lockValue, timeout = ARGV[1], ARGV[2]

if timeout ~= nil and timeout ~= false and timeout ~= "" then
  return redis.call("SET", lockKey, lockValue, "NX", "PX", timeout)
end

return redis.call("SET", lockKey, lockValue, "NX")
`

func TestUnderstoodScriptExtraArgvUnreadIsServed(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	a, b := c.client(), c.client()
	keys := []string{"k", "k:last-out-id"}
	if rep, err := a.Eval(ctx, unreadThirdArgvScript, keys, "tokA", "10000", "").Result(); err != nil || rep != "OK" {
		t.Fatalf("A's acquire with an unread third ARGV = %v, %v; want OK", rep, err)
	}
	if got := c.onMasters("k"); count(got, "tokA") < 2 {
		t.Fatalf("after A's grant the masters hold %v", got)
	}
	// Held: B's acquire, with more unread ARGV still, is refused.
	if rep, err := b.Eval(ctx, unreadThirdArgvScript, keys, "tokB", "10000", "", "x").Result(); err != redis.Nil {
		t.Fatalf("B's acquire of a held lock = %v, %v; want nil", rep, err)
	}
	if got := c.onMasters("k"); count(got, "tokB") != 0 || count(got, "tokA") < 2 {
		t.Fatalf("after B's refused acquire the masters hold %v", got)
	}
	// Too few ARGV is still refused: the script reads ARGV[2].
	if _, err := b.Eval(ctx, unreadThirdArgvScript, keys, "tokB").Result(); !refusedWith(t, err, "reads ARGV[2], but only 1 ARGV were given") {
		t.Fatal("an acquire with one ARGV was run")
	}
	// Without a timeout the script takes the lock with no expiry: no TTL
	// to account validity by, refused before any master is asked.
	if _, err := b.Eval(ctx, unreadThirdArgvScript, []string{"k2", "k2:last-out-id"}, "tokB", "", "").Result(); err == nil || err == redis.Nil {
		t.Fatalf("an acquire with no timeout = %v; want a refusal", err)
	}
	if got := c.onMasters("k2"); count(got, "(nil)") != len(got) {
		t.Fatalf("a refused acquire with no timeout left %v on the masters", got)
	}
}
