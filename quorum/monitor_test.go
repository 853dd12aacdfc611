package quorum_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// outcome is a decided request's reply and error.
type outcome struct {
	Reply resp.Reply
	Err   error
}

// acquire runs SET key token NX PX ttl through e and returns its outcome.
func acquire(t *testing.T, e *quorum.Engine, key, token string, ttl time.Duration) outcome {
	t.Helper()
	w := quorum.NewWaiter()
	r := e.Acquire([]byte(key), []byte(token), ttl, batching.Now())
	e.Submit(w, r)
	e.Wait(w)
	rep, err := r.Result()
	return outcome{rep, err}
}

// TestEvictingMasterDoesNotVote (issue 11, item 2): a master whose
// maxmemory-policy may evict keys does not vote, NOQUORUM says why, and
// once it is noeviction again it stays quarantined for max_ttl: it may
// have evicted keys of locks still valid.
func TestEvictingMasterDoesNotVote(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	e := startEngine(t, masters, bootstrap)
	poll(t, "all voting", func() bool { return allVoting(e) })
	for _, m := range masters[:2] {
		if _, err := m.Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "masters 0 and 1 excluded", func() bool {
		ms := e.Masters()
		return strings.Contains(ms[0].Excluded, "volatile-lru") && strings.Contains(ms[1].Excluded, "volatile-lru") && ms[2].Voting()
	})
	r := acquire(t, e, "k", "t", time.Second)
	var nq *quorum.NoQuorumError
	if !errors.As(r.Err, &nq) || strings.Count(r.Err.Error(), "maxmemory-policy is volatile-lru") != 2 {
		t.Fatalf("acquire with 2 of 3 masters evicting: %v %v; want NOQUORUM naming their policy", r.Reply, r.Err)
	}
	fixed := time.Now()
	for _, m := range masters[:2] {
		if _, err := m.Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "quarantined for having evicted", func() bool {
		ms := e.Masters()
		return ms[0].Excluded == "" && ms[0].QuarantineWhy == quorum.WhyEvicting && !ms[0].QuarantinedUntil.IsZero()
	})
	poll(t, "voting again", func() bool { return allVoting(e) })
	if d := time.Since(fixed); d < 2*time.Second-100*time.Millisecond {
		t.Fatalf("evicting masters voted again %v after their policy was fixed, before max_ttl (2s)", d)
	}
}

// TestQuarantineCoversTheLongestMaxTTL (issue 11, item 3): a proxy with
// max_ttl 6s grants a 5s lock and goes away; a majority of masters restart
// empty; a proxy with max_ttl 1s notices first. It must keep them
// quarantined for 6s (learned from the max_ttl the first proxy recorded on
// the other masters), not 1s, or it grants the lock twice.
func TestQuarantineCoversTheLongestMaxTTL(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 5)
	long := func(c *quorum.Config) { c.MaxTTL = 6 * time.Second }
	short := func(c *quorum.Config) { c.MaxTTL = time.Second }
	a := startEngine(t, masters, bootstrap, long)
	poll(t, "A: all voting", func() bool { return allVoting(a) })
	sent := time.Now()
	if r := acquire(t, a, "k", "tokA", 5*time.Second); r.Err != nil || !r.Reply.IsOK() {
		t.Fatalf("A's acquire: %v %v", r.Reply, r.Err)
	}
	validUntil := sent.Add(5*time.Second - quorum.Drift(5*time.Second, 0.01))
	a.Close()
	for _, m := range masters[:3] {
		m.Kill()
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	restarted := time.Now()
	b := startEngine(t, masters, short)
	poll(t, "B: masters 3 and 4 vote, 0-2 quarantined as restarted", func() bool {
		ms := b.Masters()
		for _, m := range ms[:3] {
			if m.QuarantineWhy != quorum.WhyRestarted || m.QuarantinedUntil.IsZero() {
				return false
			}
		}
		return ms[3].Voting() && ms[4].Voting()
	})
	for i, m := range b.Masters()[:3] {
		if d := m.QuarantinedUntil.Sub(restarted); d < 5900*time.Millisecond {
			t.Fatalf("B quarantines master %d for %v after the restart, want at least A's max_ttl 6s", i, d)
		}
	}
	// Past B's own max_ttl, while A's lock is valid: B must not grant it.
	for time.Since(restarted) < 2*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	if time.Now().After(validUntil) {
		t.Fatal("test too slow: A's lock already expired")
	}
	if r := acquire(t, b, "k", "tokB", 500*time.Millisecond); r.Err == nil && r.Reply.IsOK() {
		t.Fatalf("B granted k %v after the restart, while A's lock is valid for %v more", time.Since(restarted), time.Until(validUntil))
	}
	// A proxy with the long max_ttl reads the marker B wrote and agrees.
	a2 := startEngine(t, masters, long)
	poll(t, "A2 sees the quarantines", func() bool {
		for _, m := range a2.Masters()[:3] {
			if m.QuarantineWhy != quorum.WhyRestarted || m.QuarantinedUntil.Sub(restarted) < 5900*time.Millisecond {
				return false
			}
		}
		return true
	})
}

// TestBootstrapWaitNamedInNoQuorum: while bootstrap waits for a slow
// master, the others' NOQUORUM reason says so, not that they lost data.
func TestBootstrapWaitNamedInNoQuorum(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	if err := masters[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer masters[2].Resume()
	e := startEngine(t, masters, bootstrap)
	poll(t, "masters 0 and 1 waiting for the bootstrap", func() bool {
		ms := e.Masters()
		return ms[0].Up && ms[1].Up && ms[0].QuarantineWhy == quorum.WhyBootstrap && ms[1].QuarantineWhy == quorum.WhyBootstrap
	})
	r := acquire(t, e, "k", "t", time.Second)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "waiting for the bootstrap decision") || strings.Contains(r.Err.Error(), "restarted") {
		t.Fatalf("NOQUORUM during bootstrap: %v", r.Err)
	}
}
