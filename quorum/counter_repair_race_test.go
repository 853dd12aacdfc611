package quorum

import (
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCounterVoteWhileRepairFlagsChange: a master reconnected after
// losing its data sits in the provisional (WhyUnverified) quarantine, its
// repair flag false from an earlier, finished repair. Its first check
// answers "new" with a repair pending: applyMarker stores the repair flag,
// then the quarantine WhyRestarted. A counter reply read at any moment of
// that must not count: noCounterVote once read the flag first and the
// quarantine after, and a reply between the two stores saw no repair
// pending and a restart, and counted although the master's counters were
// gone (a fencing token could repeat). Found by review; with the old order
// this fails in every run.
func TestCounterVoteWhileRepairFlagsChange(t *testing.T) {
	e := fakeEngine(3)
	e.cfg.Quarantine = true
	e.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m := newMonitor(e)
	w := m.watches[0]
	w.repair.running = true // no restore goroutine: only the flags are looked at
	l := e.cfg.MaxTTL
	var counted atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	flips := 0
	for ; flips < 5000 && time.Now().Before(deadline); flips++ {
		e.repairs[0].Store(false)
		w.mu.Lock()
		w.state, w.logged = unverified, time.Time{}
		e.setQuarantine(0, time.Now().Add(l), WhyUnverified)
		w.mu.Unlock()
		var wg sync.WaitGroup
		var stop, started atomic.Bool
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Store(true)
			for !stop.Load() {
				if e.noCounterVote(0) == nil {
					counted.Add(1)
				}
			}
			if e.noCounterVote(0) == nil {
				t.Error("the master votes on counters after its check found them lost")
			}
		}()
		for !started.Load() {
			runtime.Gosched()
		}
		now := time.Now().UnixMilli()
		rep := markerReply{now: now, state: "new", start: now, end: now + l.Milliseconds(), repair: "p:1"}
		w.mu.Lock()
		w.applyMarker(rep, time.Now(), l, true)
		w.mu.Unlock()
		stop.Store(true)
		wg.Wait()
	}
	if n := counted.Load(); n > 0 {
		t.Errorf("in %d checks, a master whose counters were lost voted on counters %d times", flips, n)
	}
}
