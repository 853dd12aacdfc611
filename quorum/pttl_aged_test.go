package quorum_test

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// decideNow submits r and waits for its outcome.
func decideNow(e *quorum.Engine, r *quorum.Request) *quorum.Request {
	w := quorum.NewWaiter()
	e.Submit(w, r)
	e.Wait(w)
	return r
}

// TestPTTLAgedWhileASlowHolderAnswers: PTTL's answer (README: "conservative
// remaining validity") is the Q-th largest PTTL the holders reported, minus
// drift and minus the time since the command was parsed. Without that
// ageing, a holder that answered at once was taken at its reading's value
// when the decision came later, with a slow holder's reply: the client was
// told the lock lives past the moment a quorum stops holding it, and
// another client was granted the lock inside that window (found by a
// review; quorum/tally.go qthTTL).
func TestPTTLAgedWhileASlowHolderAnswers(t *testing.T) {
	ms := redisproc.ForTest(t, 3)
	b, c := ms[1], ms[2]
	e := startEngine(t, ms, bootstrap, func(cfg *quorum.Config) { cfg.NodeTimeout = 100 * time.Millisecond })
	poll(t, "every master voting", func() bool { return allVoting(e) })

	// B paused long enough to be stalled: acquisitions are not sent to it.
	if err := b.Pause(); err != nil {
		t.Fatal(err)
	}
	decideNow(e, e.Acquire([]byte("warm"), []byte("w"), time.Second, batching.Now()))
	time.Sleep(150 * time.Millisecond)

	// X acquires k: A answers at once, C (paused 60ms) within node_timeout.
	if err := c.Pause(); err != nil {
		t.Fatal(err)
	}
	t0 := batching.Now()
	start := time.Now()
	x := e.Acquire([]byte("k"), []byte("tokX"), time.Second, t0)
	wx := quorum.NewWaiter()
	e.Submit(wx, x)
	time.Sleep(60 * time.Millisecond)
	c.Resume()
	e.Wait(wx)
	if x.Outcome() != quorum.Granted {
		t.Fatalf("X not granted: %v", x.Outcome())
	}
	b.Resume()
	t.Logf("X granted at +%v; its own window ends at +%v (ttl - drift)", time.Since(start).Round(time.Millisecond), (time.Second - quorum.Drift(time.Second, 0.01)))

	// At +400ms X reads PTTL while C is slow (90ms).
	time.Sleep(time.Until(start.Add(400 * time.Millisecond)))
	if err := c.Pause(); err != nil {
		t.Fatal(err)
	}
	pr := e.PTTL([]byte("k"), batching.Now())
	wp := quorum.NewWaiter()
	e.Submit(wp, pr)
	time.Sleep(90 * time.Millisecond)
	c.Resume()
	e.Wait(wp)
	rep, err := pr.Result()
	if err != nil {
		t.Fatal(err)
	}
	recv := time.Now()
	claimedEnd := recv.Add(time.Duration(rep.Int) * time.Millisecond)
	t.Logf("PTTL answered %dms at +%v: X is told the lock is held until +%v", rep.Int, recv.Sub(start).Round(time.Millisecond), claimedEnd.Sub(start).Round(time.Millisecond))
	for i, m := range ms {
		v, _ := m.Do("PTTL", "k")
		t.Logf("master %d: PTTL k = %s (at +%v)", i, v, time.Since(start).Round(time.Millisecond))
	}

	// Y tries as soon as A has let the key go.
	var y *quorum.Request
	for time.Now().Before(claimedEnd) {
		y = decideNow(e, e.Acquire([]byte("k"), []byte("tokY"), time.Second, batching.Now()))
		if y.Outcome() == quorum.Granted {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if y != nil && y.Outcome() == quorum.Granted {
		at := time.Now()
		if at.Before(claimedEnd) {
			t.Errorf("VIOLATION: Y granted k at +%v while X's PTTL said X holds it until +%v (%v overlap)",
				at.Sub(start).Round(time.Millisecond), claimedEnd.Sub(start).Round(time.Millisecond), claimedEnd.Sub(at).Round(time.Millisecond))
		}
	}
}
