package quorum

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestRepairEndDoesNotClearANewerLoss: a master's counter repair for one
// data loss is running when a check reads a newer loss (the master
// restarted empty again). The first repair then finishes: the master must
// stay out of counter votes, since its counters are gone again. The
// repair's goroutine once cleared the flag whatever a check had read in
// between, and the master voted on counters it no longer held (found by
// review; fails without the check of repairState.latest).
func TestRepairEndDoesNotClearANewerLoss(t *testing.T) {
	e := fakeEngine(3)
	e.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m := newMonitor(e)
	w := m.watches[0]
	release := make(chan struct{})
	started := make(chan string, 2)
	w.repair.run = func(_ *watch, record string) (int, error) {
		started <- record
		<-release
		return 1, nil
	}
	w.mu.Lock()
	w.repairState("p:1")
	w.mu.Unlock()
	if got := <-started; got != "p:1" {
		t.Fatalf("repair started for %q, want p:1", got)
	}
	w.mu.Lock()
	w.repairState("p:2") // a check reads a newer loss while p:1's repair runs
	w.mu.Unlock()
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		running := w.repair.running
		w.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the repair did not end")
		}
		time.Sleep(time.Millisecond)
	}
	if !e.repairs[0].Load() {
		t.Fatal("the end of the repair of loss p:1 let the master vote on counters although a check had read a newer loss, p:2")
	}
	// The next check reads p:2 again and starts its repair; once done the
	// master votes on counters again.
	w.mu.Lock()
	w.repairState("p:2")
	w.mu.Unlock()
	if got := <-started; got != "p:2" {
		t.Fatalf("repair started for %q, want p:2", got)
	}
	m.wg.Wait()
	if e.repairs[0].Load() {
		t.Fatal("the repair of the latest loss ended and the master still does not vote on counters")
	}
}
