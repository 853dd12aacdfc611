package pubsub

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestPingRefusedWhileLoadingIsAnswered: a master loading its dataset (a
// restart with persistence; here DEBUG RELOAD slowed by key-load-delay)
// answers the hub's PING on its subscribed connection with -LOADING, not
// a pong: PING may not run while loading, SUBSCRIBE may. Counted as no
// answer, that PING left the connection's PONG count one behind for its
// life, every later fence on that master looked unanswered, and a copy it
// published after an early delivery never delivered the message again:
// the real release of a Redisson lock a level short on one master was
// lost (fence.go), and the waiter slept until the lease ran out.
func TestPingRefusedWhileLoadingIsAnswered(t *testing.T) {
	m0, err := redisproc.Start(redisproc.Options{Dir: t.TempDir(), ExtraArgs: []string{"--enable-debug-command", "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m0.Stop() })
	masters := append([]*redisproc.Server{m0}, redisproc.ForTest(t, 2)...)
	cfg := testConfig(t, masters)
	cfg.HoldBack = 200 * time.Millisecond
	// Keepalive PINGs rare enough not to make up for the lost count
	// before the release below; the test sends the one that meets the
	// loading.
	cfg.PingInterval, cfg.ReadTimeout, cfg.DedupWindow = 3*time.Second, 6*time.Second, 10*time.Second
	h := startHub(t, cfg)
	rec := &recorder{}
	subscribe(t, h, rec, Channel, "ch", 3)
	fenced(t, h)

	// About 0.6s of loading.
	do(t, m0, "DEBUG", "POPULATE", "1200")
	do(t, m0, "CONFIG", "SET", "key-load-delay", "500")
	do(t, m0, "CONFIG", "SET", "loading-process-events-interval-bytes", "1024")
	st := h.Stats()
	go m0.Do("DEBUG", "RELOAD") // answers after the reload, or past Do's deadline: the reload goes on
	waitFor(t, "master 0 loading", func() bool {
		info, err := m0.Do("INFO", "persistence")
		return err == nil && strings.Contains(info, "loading:1")
	})
	h.mu.Lock()
	h.masters[0].ping()
	h.mu.Unlock()
	waitFor(t, "the hub's PING refused with LOADING", func() bool {
		n := h.Stats()
		return n.PingErrors+n.Refused > st.PingErrors+st.Refused
	})
	waitFor(t, "the reload done", func() bool {
		info, err := m0.Do("INFO", "persistence")
		return err == nil && strings.Contains(info, "loading:0")
	})
	do(t, m0, "CONFIG", "SET", "key-load-delay", "0")
	h.mu.Lock()
	up := h.masters[0].conn != nil
	h.mu.Unlock()
	if !up {
		t.Fatal("the hub's connection to master 0 broke during the reload; the test needs it to stay up")
	}

	// The lone copy of the unlock at depth 2 (master 2), delivered on
	// HoldBack; then the real release, published after the fence on
	// masters 0 and 1: master 0's copy completes the quorum (2 of 3).
	do(t, masters[2], "PUBLISH", "ch", "0")
	waitFor(t, "the lone copy delivered on HoldBack", func() bool { return rec.len() == 1 })
	// Its fence PINGs written and answered (fenced would wait forever
	// for the PONG count the LOADING reply left behind).
	waitFor(t, "the fence PINGs written", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.masters[0].pingQueued && !h.masters[1].pingQueued
	})
	time.Sleep(100 * time.Millisecond)
	for _, i := range []int{0, 1} {
		dups := h.Stats().Duplicates
		do(t, masters[i], "PUBLISH", "ch", "0")
		waitFor(t, "master "+strconv.Itoa(i)+"'s copy read", func() bool { return h.Stats().Duplicates > dups })
	}
	time.Sleep(50 * time.Millisecond) // a delivery would be done by now

	if n, st := rec.len(), h.Stats(); n != 2 || st.HeldRedelivered != 1 {
		t.Fatalf("%d deliveries (%d again on the quorum); want 2: the real release, published after the early delivery, was not delivered", n, st.HeldRedelivered)
	}
}
