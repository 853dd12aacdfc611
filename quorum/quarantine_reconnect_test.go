package quorum_test

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestQuarantineReconnectionEndsOnACheck: the provisional quarantine of a
// reconnected master ended on the clock, after this proxy's own max_ttl
// (300ms here). When the master's first check after a restart was slower
// than that (its monitor's redial takes 800ms here), it voted with no
// marker check, while another proxy's 2.5s lock lived on the other
// masters, and the lock was granted twice (found by review). It now ends
// on a check's "ok" only.
func TestQuarantineReconnectionEndsOnACheck(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	var slow atomic.Bool
	var d net.Dialer
	a := startEngine(t, masters, bootstrap, func(c *quorum.Config) {
		c.MaxTTL = 300 * time.Millisecond
		c.QuarantineCheck = 30 * time.Second
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			buf := make([]byte, 16<<10)
			st := string(buf[:runtime.Stack(buf, false)])
			if slow.Load() && strings.Contains(st, "rueidis") && addr == masters[0].Addr {
				time.Sleep(800 * time.Millisecond)
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	poll(t, "A: all voting", func() bool { return allVoting(a) })
	b := startEngine(t, masters, func(c *quorum.Config) { c.MaxTTL = 3 * time.Second })
	poll(t, "B: all voting", func() bool { return allVoting(b) })
	validUntil := grantOnTwo(t, masters, b)
	slow.Store(true)
	restarted := restartEmpty(t, masters[0])
	for time.Until(validUntil) > 50*time.Millisecond {
		if s := a.Masters()[0]; s.Up && s.Voting() {
			t.Logf("A lets master 0 vote %v after its restart (marker %q)", time.Since(restarted), marker(t, masters[0]))
			if r := acquire(t, a, "k", "tokA", time.Second); r.Err == nil && r.Reply.IsOK() && time.Until(validUntil) > 0 {
				t.Fatalf("DOUBLE GRANT: A granted k %v after master 0's restart while B's holder is valid for %v more (marker on 0: %q)",
					time.Since(restarted), time.Until(validUntil), marker(t, masters[0]))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}
