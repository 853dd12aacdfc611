package quorum_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestBootstrapAfterARestartQuarantines: proxies A and B start together on
// a brand-new deployment of 3 masters, and both peeks find every master
// blank, so both bootstrap. A's bootstrap check of master 0 is slow; B
// checks every master, and its client is granted k on masters 0 and 1 (a
// leftover refuses it on master 2). Master 0 then restarts empty. A's
// bootstrap check of master 0, which runs only now, once created the
// missing marker as "ok" as if the master were still the blank one of its
// peek, and A granted k again with masters 0 and 2 while B's holder was
// valid (found by review). A check in bootstrap mode now trusts a blank
// master only while the nonce its peek left there is still there.
func TestBootstrapAfterARestartQuarantines(t *testing.T) {
	// Not parallel: the marker hook is global and blocks checks.
	masters := redisproc.ForTest(t, 3)
	const ttlA, ttlB = 2100 * time.Millisecond, 3100 * time.Millisecond
	aDecided, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	quorum.SetMarkerHook(func(e *quorum.Engine, master int, mode string) {
		if mode != "bootstrap" {
			return
		}
		switch quorum.MaxTTLOf(e) {
		case ttlA:
			once.Do(func() { close(aDecided) })
			if master == 0 {
				<-release
			}
		case ttlB:
			<-aDecided // B writes its markers only after A's peeks
		}
	})
	released := false
	defer func() {
		quorum.SetMarkerHook(nil)
		if !released {
			close(release)
		}
	}()
	a := startEngine(t, masters, bootstrap, func(c *quorum.Config) { c.MaxTTL = ttlA })
	b := startEngine(t, masters, bootstrap, func(c *quorum.Config) { c.MaxTTL = ttlB })
	poll(t, "B: all voting", func() bool { return allVoting(b) })
	validUntil := grantOnTwo(t, masters, b)
	restarted := restartEmpty(t, masters[0])
	time.Sleep(200 * time.Millisecond) // master 2's leftover has expired
	close(release)
	released = true
	// A grant counts as double only if its reply came while B's holder
	// was valid: on a loaded machine an acquire begun 50ms before can be
	// answered after B's copies expired (it reported "-75.9ms more").
	for time.Until(validUntil) > 50*time.Millisecond {
		if r := acquire(t, a, "k", "tokA", time.Second); r.Err == nil && r.Reply.IsOK() && time.Until(validUntil) > 0 {
			t.Fatalf("DOUBLE GRANT: A granted k %v after master 0's restart while B's holder is valid for %v more (marker on 0: %q)",
				time.Since(restarted), time.Until(validUntil), marker(t, masters[0]))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := marker(t, masters[0]); v == "ok" {
		t.Errorf("master 0's marker is %q: A's bootstrap check trusted a master that restarted empty after A's peek", v)
	}
}
