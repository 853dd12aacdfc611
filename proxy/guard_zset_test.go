package proxy_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuardZsetMembers: quorum.WrapGuard on sorted-set locks (Symfony's
// RedisStore: members scored with their expiry, ms on the master's clock).
// A release or read may drop expired members and the caller's own (with
// __write__, scored as its token), never another's unexpired member.
func TestGuardZsetMembers(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("analyze/testdata/libs/symfony-lock_" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	del, exists := read("delete"), read("exists")
	c := startCluster(t, 3)
	b := c.client()
	// members: score offset from now (ms) per member
	put := func(members map[string]int64) {
		for _, m := range c.masters {
			now := time.Now().UnixMilli()
			m.Do("DEL", "k")
			last := int64(0)
			for mem, off := range members {
				m.Do("ZADD", "k", strconv.FormatInt(now+off, 10), mem)
				last = max(last, now+off)
			}
			m.Do("PEXPIREAT", "k", strconv.FormatInt(last, 10))
		}
	}
	members := func() []string {
		out := make([]string, len(c.masters))
		for i, m := range c.masters {
			out[i], _ = m.Do("ZRANGE", "k", "0", "-1")
		}
		return out
	}

	t.Run("delete drops the caller's lock and an expired member", func(t *testing.T) {
		put(map[string]int64{"tokB": 20000, "__write__": 20000, "tokOld": -5000})
		// Same score for tokB and __write__: ZADD them with one now.
		for _, m := range c.masters {
			s, _ := m.Do("ZSCORE", "k", "tokB")
			m.Do("ZADD", "k", s, "__write__")
		}
		rep, err := h69Eval(t, b, del, []string{"k"}, "tokB")
		if err != nil || rep != int64(1) {
			t.Fatalf("B's delete of its own lock answered %v %v; members %v", rep, err, members())
		}
		for i, m := range members() {
			if m != "tokOld" && m != "" {
				t.Errorf("master %d keeps %q", i, m)
			}
		}
	})
	t.Run("exists drops expired members", func(t *testing.T) {
		put(map[string]int64{"tokB": 20000, "tokOld": -5000})
		rep, err := h69Eval(t, b, exists, []string{"k"}, "0", "tokB")
		if err != nil || rep != int64(1) {
			t.Fatalf("B's exists answered %v %v; members %v", rep, err, members())
		}
		for i, m := range members() {
			if m != "tokB" {
				t.Errorf("master %d has %q, want tokB alone", i, m)
			}
		}
	})
	t.Run("another's unexpired member is put back", func(t *testing.T) {
		// B holds a member too (a shared lock): the force band deletes
		// the key, A's member with it.
		put(map[string]int64{"tokA": 20000, "tokB": 25000})
		rep, err := h69Eval(t, b, zsetReleaseForceBand, []string{"k"}, "tokB", "force")
		if err == nil || !strings.Contains(err.Error(), "another client holds") {
			t.Errorf("B's release answered %v %v, want the guard's error", rep, err)
		}
		for i, m := range members() {
			if m != "tokA tokB" {
				t.Errorf("master %d has %q, want tokA tokB put back", i, m)
			}
		}
	})
	t.Run("a key expiring before another's member is put back", func(t *testing.T) {
		put(map[string]int64{"tokA": 20000, "tokB": 1000})
		const shorten = `if redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  redis.call("ZREM", KEYS[1], ARGV[1])
  redis.call("PEXPIRE", KEYS[1], 2000)
  return 1
end
return 0`
		rep, err := h69Eval(t, b, shorten, []string{"k"}, "tokB")
		if err == nil || !strings.Contains(err.Error(), "another client holds") {
			t.Errorf("B's release answered %v %v, want the guard's error", rep, err)
		}
		for i, m := range c.masters {
			if p, _ := m.Do("PTTL", "k"); len(p) < 5 {
				t.Errorf("master %d: k's PTTL %s, want A's 20 s kept", i, p)
			}
		}
	})
}
