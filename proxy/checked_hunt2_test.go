package proxy_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// More acquires and extends the analyzer understood that were granted to B
// while A held the lock inside its validity (hunt, helper-92).

// writtenKeyDel acquires KEYS[1] and deletes KEYS[2], a signal list it
// clears on every grant: the probes saw KEYS[2] written, so the masters
// leave it to the script (quorum.Check.Aux). Named as another client's
// lock, it deleted that lock, and the next acquire of it was granted.
const writtenKeyDel = `if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  redis.call("DEL", KEYS[2])
  return 1
end
return 0`

func TestCheckedWrittenKeyDeletesALock(t *testing.T) {
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	b := c.client()
	otherKeyIsALock(t, c, ttl, func() {
		rep, err := h69Eval(t, b, writtenKeyDel, []string{"x1", "lockB"}, "tokB", ttl.Milliseconds())
		t.Logf("B's acquire naming A's lock as its signal key answered %v %v", rep, err)
	})
	// Its own signal list, a list, is still cleared and the lock granted.
	for _, m := range c.masters {
		if _, err := m.Do("RPUSH", "sig", "1"); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := h69Eval(t, b, writtenKeyDel, []string{"x2", "sig"}, "tokB", ttl.Milliseconds()); err != nil || rep != int64(1) {
		t.Errorf("acquire clearing its signal list answered %v %v", rep, err)
	}
	// A fencing counter, a string with no expiry, still grows.
	for _, m := range c.masters {
		if _, err := m.Do("SET", "fence", "5"); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := h69Eval(t, b, fencedAcquire, []string{"x3", "fence"}, "tokB", ttl.Milliseconds())
	if n, ok := rep.(int64); err != nil || !ok || n <= 5 {
		t.Errorf("fenced acquire with a counter at 5 answered %v %v, want a token over 5", rep, err)
	}
}

// tokenlessNX is a plain tokenless acquire: "1" when the key is free.
const tokenlessNX = `if redis.call("SET", KEYS[1], "1", "NX", "PX", ARGV[1]) then return 1 end
return 0`

// TestCheckedTokenlessContenderKeepsExpiry: a contender's failed tokenless
// acquire leaves the holder's expiry where it was. The check moved the
// expiry of every copy holding the token by 1 ms, and a tokenless copy
// holds everyone's: each attempt made a crashed holder's lock live 1 ms
// longer (liveness).
func TestCheckedTokenlessContenderKeepsExpiry(t *testing.T) {
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	if rep, err := h69Eval(t, a, tokenlessNX, []string{"k"}, 20000); err != nil || rep != int64(1) {
		t.Fatalf("A's tokenless acquire: %v %v", rep, err)
	}
	before := make([]string, len(c.masters))
	for i, m := range c.masters {
		before[i], _ = m.Do("PEXPIRETIME", "k")
	}
	for i := 0; i < 20; i++ {
		if rep, err := h69Eval(t, b, tokenlessNX, []string{"k"}, 20000); err != nil || rep != int64(0) {
			t.Fatalf("B's tokenless acquire of a held key answered %v %v, want 0", rep, err)
		}
	}
	for i, m := range c.masters {
		if at, _ := m.Do("PEXPIRETIME", "k"); at != before[i] {
			t.Errorf("master %d: A's lock expires at %s after 20 failed contenders, %s before", i, at, before[i])
		}
	}
}

// hashConstField takes a hash lock, {token: 1, "mode": "w"}, and with
// "force", when the key has under 30 s left, takes it again.
const hashConstField = `local t = redis.call("PTTL", KEYS[1])
if ARGV[3] == "force" and t > 0 and t < 30000 then
  redis.call("DEL", KEYS[1])
  redis.call("HSET", KEYS[1], ARGV[1], 1, "mode", "w")
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
if redis.call("EXISTS", KEYS[1]) == 0 then
  redis.call("HSET", KEYS[1], ARGV[1], 1, "mode", "w")
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
return 0`

// TestCheckedConstantToken: a call whose token is one of the script's
// string constants is refused. The masters cannot tell it from that
// constant written in every holder's copy: with Symfony's own save, the
// token "__write__" (its marker member, scored as the holder's) passed
// for A and was granted A's lock; with a hash lock's constant field
// "mode", so was its force band.
func TestCheckedConstantToken(t *testing.T) {
	save, err := os.ReadFile("analyze/testdata/libs/symfony-lock_save.lua")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	for _, x := range []struct {
		name, body, key, tokB string
		args, argsB           []any
	}{
		{"symfony save", string(save), "ks", "__write__", []any{"0", "tokA", ttl.Milliseconds()}, []any{"0", "__write__", ttl.Milliseconds()}},
		{"hash constant field", hashConstField, "kh", "mode", []any{"tokA", ttl.Milliseconds(), "no"}, []any{"mode", ttl.Milliseconds(), "force"}},
	} {
		tSend := time.Now()
		if rep, err := h69Eval(t, a, x.body, []string{x.key}, x.args...); err != nil || rep != int64(1) {
			t.Fatalf("%s: A's acquire: %v %v", x.name, rep, err)
		}
		validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
		rep, err := h69Eval(t, b, x.body, []string{x.key}, x.argsB...)
		t.Logf("%s: B's acquire with the token %q answered %v %v", x.name, x.tokB, rep, err)
		if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
			t.Errorf("DOUBLE GRANT (%s): B granted %s %v before A's validity ends", x.name, x.key, time.Until(validUntil).Round(time.Millisecond))
		}
		if err == nil || !strings.Contains(err.Error(), "constant equal to the lock token") {
			t.Errorf("%s: B's call answered %v %v, want the constant-token refusal", x.name, rep, err)
		}
	}
}
