package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// Replies that only look like a yes, and writes on paths nobody checked:
// a master's vote counts only where its copy holds the caller's token,
// for long enough, after the script ran; and a non-force script that took,
// changed or shortened another holder's lock is undone on the spot
// (quorum.WrapCheck).

// TestTakenLockPutBack: a [[scripts]] entry registered as a plain acquire
// (not force: nothing tells lockproxy otherwise) takes the lock whoever
// holds it when a third argument is passed, as an operator's script may
// on a path nobody thought of. Each master puts the holder's lock back as
// it was, and the taking call is no yes. With force acquisition off, B
// was granted A's lock on every master (review, helper-58).
func TestTakenLockPutBack(t *testing.T) {
	const body = `if #ARGV > 2 then return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`
	cat, err := catalog.New([]catalog.ScriptConfig{{Name: "take if told", Body: body, Kind: "acquire", Vote: "ok",
		TTLArg: 2, TTLUnit: "ms", TokenArg: 1, NoReply: "nil"}})
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, func(pc *proxy.Config, qc *quorum.Config) {
		pc.Catalog, pc.DenyForce = cat, true
		qc.Scripts = cat.MasterScripts()
	})
	ctx := context.Background()
	a, b := c.client(), c.client()
	if ok, err := a.SetNX(ctx, "k", "tokA", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	before := c.pttls("k")
	rep, err := b.Eval(ctx, body, []string{"k"}, "tokB", "10000", "take").Result()
	t.Logf("B's EVAL with the third argument: %v %v; masters %v, PTTLs %v (before %v)", rep, err, c.onMasters("k"), c.pttls("k"), before)
	if err == nil && rep == "OK" {
		t.Fatalf("DOUBLE GRANT: B granted k while A holds it, with allow_force_acquire = false")
	}
	for i, v := range c.onMasters("k") {
		if v != "tokA" {
			t.Fatalf("master %d holds %q: A's lock was not put back", i, v)
		}
	}
	for i, p := range c.pttls("k") {
		if p < before[i]-1000 {
			t.Fatalf("master %d: A's lock has %d ms left, %d before B's call", i, p, before[i])
		}
	}
}

// TestHolderTTLIsNoYes: an acquire whose no reply is the holder's TTL in SECONDS (TTL, not
// PTTL) and whose yes reply is a small integer (1, or 0). The analyzer saw
// the holder's TTL only at ~7000 s (held keys have ~7,000,003 ms left), so
// the no reply 7000 never looked like a yes and nothing was marked: the
// zero-PTTL wrap covers only a no reply that is the PTTL, and only 0. On
// real masters a holder with 0.5-1.5 s left answers TTL 1, one with less
// than 0.5 s answers 0: a yes from every master that holds ANOTHER
// client's still-valid lock, without the script writing anything. A yes
// counts only where the master's copy holds the caller's token after the
// script (quorum.WrapCheck; review, helper-58).
func TestHolderTTLIsNoYes(t *testing.T) {
	for _, s := range []struct {
		name, body string
		wait       time.Duration
	}{
		{"yes 1, holder TTL 1 s", `if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return 1 end
return redis.call('ttl', KEYS[1])`, 1000 * time.Millisecond},
		{"yes 0, holder TTL 0 s", `if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return 0 end
return redis.call('ttl', KEYS[1])`, 1650 * time.Millisecond},
	} {
		t.Run(s.name, func(t *testing.T) {
			c := startCluster(t, 3)
			ctx := context.Background()
			a, b := c.client(), c.client()
			const ttl = 2000 * time.Millisecond
			tSend := time.Now()
			if ok, err := a.SetNX(ctx, "k", "tokA", ttl).Result(); err != nil || !ok {
				t.Fatalf("A: %v %v", ok, err)
			}
			validUntil := tSend.Add(ttl - time.Duration(float64(ttl)*0.01) - 2*time.Millisecond)
			time.Sleep(s.wait)
			rep, err := b.Eval(ctx, s.body, []string{"k"}, "tokB", "10000").Result()
			now := time.Now()
			t.Logf("B's EVAL: %v %v; masters %v, PTTL %v", rep, err, c.onMasters("k"), c.pttls("k"))
			yes := int64(1)
			if s.name[4] == '0' {
				yes = 0
			}
			if err == nil && rep == yes && now.Before(validUntil) {
				t.Fatalf("DOUBLE GRANT: B granted k (reply %v) %v before A's validity ends; B's token is on no master", rep, validUntil.Sub(now))
			}
		})
	}
}

// TestHolderValueIsNoYes: the no reply is the holder's VALUE and the yes reply a constant
// ('1'). The probes' other holders have random-looking tokens, never one of
// the script's constants, so the yes rule "bulk '1'" looked exact. A lock
// held by a tokenless client (SET k 1 NX PX, the commonest simple lock)
// answers '1' on every master: B is granted while A holds the lock.
// Array variant: {ttl-in-seconds, value} against a yes {1, token}.
func TestHolderValueIsNoYes(t *testing.T) {
	for _, s := range []struct {
		name, body, valA string
		wait             time.Duration
		yes              any
	}{
		{"value echoed, yes '1', holder wrote 1", `if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return '1' end
return redis.call('get', KEYS[1])`, "1", 0, "1"},
		{"array {TTL s, value}, yes {1, token}", `if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return {1, ARGV[1]} end
return {redis.call('ttl', KEYS[1]), redis.call('get', KEYS[1])}`, "tokA", 1000 * time.Millisecond, []any{int64(1), "tokA"}},
	} {
		t.Run(s.name, func(t *testing.T) {
			c := startCluster(t, 3)
			ctx := context.Background()
			a, b := c.client(), c.client()
			const ttl = 2000 * time.Millisecond
			tSend := time.Now()
			if ok, err := a.SetNX(ctx, "k", s.valA, ttl).Result(); err != nil || !ok {
				t.Fatalf("A: %v %v", ok, err)
			}
			validUntil := tSend.Add(ttl - time.Duration(float64(ttl)*0.01) - 2*time.Millisecond)
			time.Sleep(s.wait)
			rep, err := b.Eval(ctx, s.body, []string{"k"}, "tokB", "10000").Result()
			now := time.Now()
			t.Logf("B's EVAL: %#v %v; masters %v", rep, err, c.onMasters("k"))
			if err == nil && now.Before(validUntil) {
				if r, ok := rep.([]any); ok && len(r) > 0 && r[0] == int64(1) || rep == "1" {
					t.Fatalf("DOUBLE GRANT: B granted k (reply %v) %v before A's validity ends; B's token is on no master", rep, validUntil.Sub(now))
				}
			}
		})
	}
}

// TestExtendHearsNoOtherHolder: the extend form of TestHolderTTLIsNoYes: yes 1 (PEXPIRE's reply), no = TTL in
// seconds. A's lock expired and B took it; when B's lock has 0.5-1.5 s
// left, A's extend hears 1 from every master and is told "extended" for
// 10 s while B's grant is still valid.
func TestExtendHearsNoOtherHolder(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	a, b := c.client(), c.client()
	const body = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return redis.call('ttl', KEYS[1])`
	if ok, err := a.SetNX(ctx, "k", "tokA", 300*time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	time.Sleep(400 * time.Millisecond)
	const ttl = 2000 * time.Millisecond
	tSend := time.Now()
	if ok, err := b.SetNX(ctx, "k", "tokB", ttl).Result(); err != nil || !ok {
		t.Fatalf("B: %v %v", ok, err)
	}
	validUntil := tSend.Add(ttl - time.Duration(float64(ttl)*0.01) - 2*time.Millisecond)
	time.Sleep(1000 * time.Millisecond)
	rep, err := a.Eval(ctx, body, []string{"k"}, "tokA", "10000").Result()
	now := time.Now()
	t.Logf("A's extend: %v %v; masters %v", rep, err, c.onMasters("k"))
	if err == nil && rep == int64(1) && now.Before(validUntil) {
		t.Fatalf("DOUBLE GRANT: A told its lock is extended 10 s while B holds k (%v of B's validity left)", validUntil.Sub(now))
	}
}
