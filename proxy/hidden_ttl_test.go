package proxy_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScriptsWithHiddenTTLBranchesRefused: scripts whose lock TTL depends
// on argument values the analysis's probes did not use (a clamp every
// probe value crossed, a branch taken when two arguments are equal) are
// refused with a reason, and leave nothing on the masters. A review found
// each one taken through lockproxy: a 10-minute lock under a 2s max_ttl
// (granted twice once a majority restarted empty and its quarantine
// ended), a lock with no expiry, and an extend that grew past max_ttl.
func TestScriptsWithHiddenTTLBranchesRefused(t *testing.T) {
	const maxTTL = 2 * time.Second
	c := startCluster(t, 3, withQuarantine(maxTTL))
	c.waitVoting(3)
	ctx := context.Background()
	x := c.client()
	tok := "0123456789abcdef0123456789abcdef0123" // 36 bytes, like a UUID
	for _, s := range []struct {
		name, body string
		key        string
		args       []any
		held       bool // the caller holds key before (an extend)
	}{
		{"TTL clamped by a threshold the probes crossed", `local ttl = tonumber(ARGV[2])
if ttl > string.len(ARGV[1]) ^ 4 then ttl = 1000 end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl)`, "clamp", []any{tok, "600000"}, false},
		{"no expiry when ARGV[3] is the token", `if ARGV[3] == ARGV[1] then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`, "noexp", []any{tok, "1000", tok}, false},
		{"additive extend when ARGV[3] is the token", `if redis.call('get', KEYS[1]) == ARGV[1] then local t = tonumber(ARGV[2]) if ARGV[3] == ARGV[1] then t = t + redis.call('pttl', KEYS[1]) end return redis.call('pexpire', KEYS[1], t) end return 0`,
			"additive", []any{tok, "1900", tok}, true},
	} {
		t.Run(s.name, func(t *testing.T) {
			if s.held {
				if ok, err := x.SetNX(ctx, s.key, tok, maxTTL).Result(); err != nil || !ok {
					t.Fatalf("taking %s: %v %v", s.key, ok, err)
				}
			}
			for range 5 {
				rep, err := x.Eval(ctx, s.body, []string{s.key}, s.args...).Result()
				if err == nil || !strings.HasPrefix(err.Error(), "ERR unknown script") || !strings.Contains(err.Error(), "because") {
					t.Fatalf("EVAL answered %v, %v; want ERR unknown script … because …", rep, err)
				}
			}
			for i, m := range c.masters {
				v, err := m.Do("PTTL", s.key)
				if err != nil {
					t.Fatal(err)
				}
				n, _ := strconv.Atoi(v)
				if n == -1 || time.Duration(n)*time.Millisecond > maxTTL {
					t.Errorf("master %d: PTTL %s = %s ms, beyond max_ttl %v", i, s.key, v, maxTTL)
				}
				if !s.held && n != -2 {
					t.Errorf("master %d: the refused acquire left %s (PTTL %s)", i, s.key, v)
				}
			}
		})
	}
}
