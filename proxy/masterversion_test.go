package proxy_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestMasterVersionOnRealServers runs on the redis-server the tests start
// (LOCKPROXY_REDIS_SERVER picks another: docs/testing.md). It reads the
// masters' version itself and holds lockproxy to the same outcome either
// way: a release script whose branch cuts the lock key's expiry below
// another holder's sorted-set member leaves that holder's 20 s, and INFO
// shows the version. On Redis 7.0 or later the guard catches the script
// (its PEXPIRETIME reads the expiry) and the masters vote. On an older
// one lockproxy refuses the masters at connection: every command is
// NOQUORUM naming the version and the upgrade, and nothing reaches them.
// Run on Redis 6.2.16 without the refusal, the guard missed the cut (its
// PEXPIRETIME failed inside redis.pcall) and A's lock was left with 2 s
// on every master, its holder believing it held 20.
func TestMasterVersionOnRealServers(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	info, err := masters[0].Do("INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	v, err := batching.ParseServerInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	supported := v.AtLeast(quorum.MinMasterMajor, quorum.MinMasterMinor)
	t.Logf("masters: %s (supported: %v)", v, supported)
	c := startFront(t, masters, false)
	if supported {
		c.waitUp(3)
		c.waitVoting(3)
	} else {
		// Not fatal: what the masters then do to A's lock is the point.
		deadline := time.Now().Add(5 * time.Second)
		for refused := 0; refused < 3; {
			refused = 0
			for _, st := range c.engine.Masters() {
				if old := (*quorum.OldMasterError)(nil); errors.As(st.Err, &old) {
					refused++
				}
			}
			if time.Now().After(deadline) {
				t.Errorf("old masters not refused within 5s: %+v", c.engine.Masters())
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ctx := context.Background()
	b := c.client()
	text, err := b.Info(ctx, "quorum").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := ",server=" + v.Server + ",version=" + v.Version + ",redis_version=" + v.Redis + "\r\n"; strings.Count(text, want) != 3 {
		t.Errorf("INFO quorum does not show %q for each master:\n%s", want, text)
	}

	// A holds the lock (a member 20 s out), B a member expiring in 1 s.
	for _, m := range masters {
		now := time.Now().UnixMilli()
		m.Do("ZADD", "k", strconv.FormatInt(now+20000, 10), "tokA", strconv.FormatInt(now+1000, 10), "tokB")
		m.Do("PEXPIREAT", "k", strconv.FormatInt(now+20000, 10))
	}
	const shorten = `if redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  redis.call("ZREM", KEYS[1], ARGV[1])
  redis.call("PEXPIRE", KEYS[1], 2000)
  return 1
end
return 0`
	rep, err := h69Eval(t, b, shorten, []string{"k"}, "tokB")
	want := "another client holds" // the guard's error
	if !supported {
		want = "older than Redis 7.0"
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("B's release answered %v %v, want an error saying %q", rep, err, want)
	}
	for i, m := range masters {
		if p, _ := m.Do("PTTL", "k"); len(p) < 5 {
			t.Errorf("master %d: k's PTTL %s ms, want A's 20 s kept", i, p)
		}
	}

	ok, err := b.SetNX(ctx, "lk", "tok", 5*time.Second).Result()
	switch {
	case supported && (err != nil || !ok):
		t.Errorf("SET NX on free key: %v %v, want OK", ok, err)
	case !supported && (err == nil || !strings.Contains(err.Error(), "upgrade it")):
		t.Errorf("SET NX over refused masters: %v %v, want NOQUORUM saying to upgrade them", ok, err)
	case !supported:
		if n := count(c.onMasters("lk"), "(nil)"); n != 3 {
			t.Errorf("refused masters hold the lock key on %d of 3", 3-n)
		}
	}
}
