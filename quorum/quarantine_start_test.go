package quorum_test

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestQuarantineLiftAtStartWaitsForTheOthers: a proxy A starts while a
// restarted master's quarantine, written by a proxy with a short max_ttl
// that has since stopped, has run out; another proxy B's 2.5s lock lives on
// masters 0 and 1. Until A's pipeline to master 0 was up, the master's
// "stopped voting" time was unset, so its first check lifted the
// quarantine without any check of the other masters, on A's own 300ms, and
// A granted the lock again (found by review). The Dial hook only fixes the
// order of that start-up race: A's pipeline to master 0 connects 400ms
// late, its monitor's connections to masters 1 and 2 200ms late.
func TestQuarantineLiftAtStartWaitsForTheOthers(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	b := startEngine(t, masters, bootstrap, func(c *quorum.Config) { c.MaxTTL = 3 * time.Second })
	poll(t, "B: all voting", func() bool { return allVoting(b) })
	validUntil := grantOnTwo(t, masters, b)
	restarted := restartEmpty(t, masters[0])
	// What a proxy A1 with max_ttl 300ms, the first to check master 0 after
	// its restart, wrote before it stopped (rolling restart of A).
	if _, err := masters[0].Do("EVAL", `redis.call('SELECT', 1)
local t = redis.call('TIME'); local now = tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000)
redis.call('SET', KEYS[1], string.format('q:%d:%d', now-10, now+290))
redis.call('ZADD', KEYS[2], now+290+5000, '300')
return 1`, "2", quorum.MarkerKey, quorum.MaxTTLKey); err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond) // A1's 300ms have run out
	var d net.Dialer
	a := startEngine(t, masters, func(c *quorum.Config) {
		c.MaxTTL = 300 * time.Millisecond
		c.QuarantineCheck = 30 * time.Second
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			buf := make([]byte, 16<<10)
			st := string(buf[:runtime.Stack(buf, false)])
			monitor := strings.Contains(st, "rueidis")
			switch {
			case !monitor && addr == masters[0].Addr:
				time.Sleep(400 * time.Millisecond)
			case monitor && addr != masters[0].Addr:
				time.Sleep(200 * time.Millisecond)
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	time.Sleep(100 * time.Millisecond)
	t.Logf("%v after restart, marker on master 0: %q", time.Since(restarted), marker(t, masters[0]))
	for time.Until(validUntil) > 50*time.Millisecond {
		if r := acquire(t, a, "k", "tokA", time.Second); r.Err == nil && r.Reply.IsOK() && time.Until(validUntil) > 0 {
			t.Fatalf("DOUBLE GRANT: A granted k %v after master 0's restart while B's holder is valid for %v more (marker on 0: %q)",
				time.Since(restarted), time.Until(validUntil), marker(t, masters[0]))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
