package quorum_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestQuarantineLiftWaitsForTheOtherMasters: proxy A (max_ttl 300ms,
// checks every 30s) has been running; proxy B (max_ttl 3s) joins, records
// its max_ttl on every master, grants a 2.5s lock on masters 0 and 1
// (master 2 refuses: a leftover), and goes away. Master 0 restarts empty.
// A knows only its own 300ms, and its last checks of masters 1 and 2 came
// before B: lifting master 0's quarantine after 300ms, A granted the lock
// again while B's holder still held it (found by review). The lift now
// waits until every other master was checked after master 0 stopped
// voting: A reads B's 3s on master 1 and keeps master 0 out for it.
//
// In "others slow", masters 1 and 2 are paused (SIGSTOP) for 700ms right
// after master 0's restart, so that A's checks of them hang past master
// 0's 300ms: the lift must wait for those checks to end, not only ask for
// them. In "others stalled", for 1.5s, past a check's timeout: a check
// that failed read no record, and must not count (found by review).
func TestQuarantineLiftWaitsForTheOtherMasters(t *testing.T) {
	for _, c := range []struct {
		name  string
		pause time.Duration
	}{{"others answer", 0}, {"others slow", 700 * time.Millisecond}, {"others stalled", 1500 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testQuarantineLiftWaits(t, c.pause)
		})
	}
}

func testQuarantineLiftWaits(t *testing.T, pause time.Duration) {
	masters := redisproc.ForTest(t, 3)
	a := startEngine(t, masters, bootstrap, func(c *quorum.Config) {
		c.MaxTTL = 300 * time.Millisecond
		c.QuarantineCheck = 30 * time.Second
	})
	poll(t, "A: all voting", func() bool { return allVoting(a) })
	b := startEngine(t, masters, func(c *quorum.Config) { c.MaxTTL = 3 * time.Second })
	poll(t, "B: all voting", func() bool { return allVoting(b) })
	validUntil := grantOnTwo(t, masters, b)
	restarted := restartEmpty(t, masters[0])
	if pause > 0 {
		for _, m := range masters[1:] {
			if err := m.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(pause)
		for _, m := range masters[1:] {
			if err := m.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Until B's holder's validity ends, A must not grant k (nor let
	// master 0 vote: with master 2 it would be a quorum).
	tries := 0
	for time.Until(validUntil) > 50*time.Millisecond {
		if a.Masters()[0].Voting() {
			t.Fatalf("A lets master 0 vote %v after its restart, while B's 2.5s lock lives on master 1 for %v more (marker on master 0: %q)",
				time.Since(restarted), time.Until(validUntil), marker(t, masters[0]))
		}
		if tries < 20 && time.Since(restarted) > 400*time.Millisecond {
			tries++
			if r := acquire(t, a, "k", "tokA", time.Second); r.Err == nil && r.Reply.IsOK() && time.Until(validUntil) > 0 {
				t.Fatalf("DOUBLE GRANT: A granted k %v after master 0's restart while B's holder is valid for %v more", time.Since(restarted), time.Until(validUntil))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tries == 0 {
		t.Fatal("the machine was too slow to try A's acquisition within B's validity")
	}
	// Then it lifts: after B's 3s from the restart, with A's 30s checks.
	poll(t, "A: master 0 voting again", func() bool { return a.Masters()[0].Voting() })
	if d := time.Since(restarted); d < 3*time.Second {
		t.Errorf("master 0 votes again %v after its restart, before B's max_ttl of 3s", d)
	}
}

// TestRestartedMasterVotesOnlyOnACheck: while the lift waits for the other
// masters (paused here), a restarted master's quarantine may run out on
// the clock between two checks; its votes must not count in between (the
// engine ended it on the clock, and the master voted for a round trip at
// every recheck: found by review). It ends on a check's "ok" only.
func TestRestartedMasterVotesOnlyOnACheck(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	a := startEngine(t, masters, bootstrap, func(c *quorum.Config) {
		c.MaxTTL = 300 * time.Millisecond
		c.QuarantineCheck = 30 * time.Second
	})
	poll(t, "A: all voting", func() bool { return allVoting(a) })
	restarted := restartEmpty(t, masters[0])
	for _, m := range masters[1:] {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	votes, polls := 0, 0
	var first time.Duration
	for time.Since(restarted) < 900*time.Millisecond {
		polls++
		if s := a.Masters()[0]; s.Up && s.Voting() {
			if votes++; votes == 1 {
				first = time.Since(restarted)
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
	for _, m := range masters[1:] {
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if votes > 0 {
		t.Errorf("master 0 voted in %d of %d looks (first %v after its restart) while no other master had answered since", votes, polls, first)
	}
	poll(t, "A: master 0 voting once the others answered", func() bool { return a.Masters()[0].Voting() })
}

// grantOnTwo has proxy b (max_ttl 3s) grant k to tokB for 2.5s on masters
// 0 and 1 (a 150ms leftover refuses it on master 2), closes b, and returns
// when its holder's validity ends.
func grantOnTwo(t *testing.T, masters []*redisproc.Server, b *quorum.Engine) time.Time {
	t.Helper()
	const ttl = 2500 * time.Millisecond
	// A loaded machine can make a master miss the 50 ms node_timeout
	// (NOQUORUM): start again from a clean key, a few times, each attempt
	// with its own token so that a late undo of one cannot meet the next.
	for attempt := 0; ; attempt++ {
		for _, m := range masters {
			if _, err := m.Do("DEL", "k"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := masters[2].Do("SET", "k", "leftover", "PX", "150"); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		r := acquire(t, b, "k", "tokB"+strconv.Itoa(attempt), ttl)
		if r.Err == nil && r.Reply.IsOK() {
			b.Close()
			return sent.Add(ttl - quorum.Drift(ttl, 0.01))
		}
		var nq *quorum.NoQuorumError
		if attempt == 4 || !errors.As(r.Err, &nq) {
			t.Fatalf("B's acquire (attempt %d): %v %v", attempt+1, r.Reply, r.Err)
		}
		time.Sleep(200 * time.Millisecond) // its late replies and undos land
	}
}

// restartEmpty kills m and starts it again without its data, and returns
// when.
func restartEmpty(t *testing.T, m *redisproc.Server) time.Time {
	t.Helper()
	m.Kill()
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}
