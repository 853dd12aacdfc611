package pubsub

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestHeldUntilQuorum: a message is delivered once a quorum of masters
// published it (a release that ran on a quorum), not on the first copy; one
// published on a single master is delivered HoldBack later; messages of a
// subscription that no master sent both of keep the order they were first
// seen in (order_test.go has the others). Make onCopy deliver
// on the first copy to see the first check fail.
func TestHeldUntilQuorum(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	cfg := testConfig(t, masters)
	cfg.HoldBack = 300 * time.Millisecond
	h := startHub(t, cfg)
	rec := &recorder{}
	subscribe(t, h, rec, Channel, "ch", 3)

	do(t, masters[0], "PUBLISH", "ch", "a")
	time.Sleep(100 * time.Millisecond) // well under HoldBack
	if n := rec.len(); n != 0 {
		t.Fatalf("delivered on the first master's copy: %v", rec.payloads())
	}
	do(t, masters[1], "PUBLISH", "ch", "a")
	waitFor(t, "delivery on the second copy", func() bool { return rec.len() == 1 })
	do(t, masters[2], "PUBLISH", "ch", "a")
	time.Sleep(50 * time.Millisecond)
	if got := rec.payloads(); !slices.Equal(got, []string{"ch=a"}) {
		t.Fatalf("three copies of one message: %v", got)
	}

	// One master only: HoldBack later.
	start := time.Now()
	do(t, masters[2], "PUBLISH", "ch", "lone")
	waitFor(t, "a lone copy's delivery", func() bool { return rec.len() == 2 })
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("a copy from one master of three delivered after %v, before HoldBack", el)
	}
	if h.Stats().HeldTimeouts != 1 {
		t.Fatalf("HeldTimeouts %d, want 1", h.Stats().HeldTimeouts)
	}

	// Order: x seen first on one master, y then on every master; y waits
	// behind x.
	do(t, masters[0], "PUBLISH", "ch", "x")
	waitFor(t, "x held", func() bool { // read by the hub before y is published
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.heldBytes > 0
	})
	onEvery(masters, func(m *redisproc.Server) { do(t, m, "PUBLISH", "ch", "y") })
	waitFor(t, "x and y", func() bool { return rec.len() == 4 })
	if got := rec.payloads()[2:]; !slices.Equal(got, []string{"ch=x", "ch=y"}) {
		t.Fatalf("order %v, want x then y", got)
	}
}

// TestHeldBytesBound: past MaxHeldBytes a message goes out on its first
// copy instead of being kept.
func TestHeldBytesBound(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	cfg := testConfig(t, masters)
	cfg.HoldBack = 5 * time.Second
	cfg.MaxHeldBytes = 1000
	h := startHub(t, cfg)
	rec := &recorder{}
	subscribe(t, h, rec, Channel, "ch", 3)
	big := string(make([]byte, 2000))
	do(t, masters[0], "PUBLISH", "ch", big)
	waitFor(t, "an oversize held message delivered at once", func() bool { return rec.len() == 1 })
}

// TestEarlyMessageDeliveredAgainOnQuorum: a Redisson lock one level short
// on master 4 (it was down at the re-entry and came back without a
// restart) deletes the lock there on the holder's first unlock, which
// only counts down on the quorum, and master 4 alone publishes the
// release message: the hub delivers it HoldBack later, while a quorum
// still holds the lock. The real release then publishes the same payload
// on masters 0 to 3, whose copies the dedup takes for the ones they owe
// of the lone message. They used to be dropped: the real release was
// never delivered and a waiter slept until the lease ran out. Now the
// copy that completes a quorum (master 4's, which stands for a master the
// lock is gone from, and two more) delivers it again; below a quorum
// nothing is delivered again, and a message that had its quorum in time
// is delivered once.
func TestEarlyMessageDeliveredAgainOnQuorum(t *testing.T) {
	masters := redisproc.ForTest(t, 5)
	cfg := testConfig(t, masters)
	cfg.HoldBack = 500 * time.Millisecond // y's three copies come well within it
	h := startHub(t, cfg)
	rec := &recorder{}
	subscribe(t, h, rec, Channel, "ch", 5)
	dups := h.Stats().Duplicates
	copyOn := func(i int, payload string) { // one master's copy, read by the hub
		t.Helper()
		do(t, masters[i], "PUBLISH", "ch", payload)
		dups++
		waitFor(t, fmt.Sprint("master ", i, "'s copy read"), func() bool { return h.Stats().Duplicates >= dups })
	}
	want := func(n int, what string) {
		t.Helper()
		time.Sleep(50 * time.Millisecond) // a delivery would be done by now
		if got := rec.len(); got != n {
			t.Fatalf("%s: %d deliveries %v, want %d", what, got, rec.payloads(), n)
		}
	}

	do(t, masters[4], "PUBLISH", "ch", "0") // the unlock at depth 2
	waitFor(t, "the lone copy delivered on HoldBack", func() bool { return rec.len() == 1 })
	fenced(t, h)   // what follows is published after that (fence.go)
	copyOn(0, "0") // the real release: 2 masters of 5 released
	want(1, "the lone copy and one copy of the real release")
	copyOn(1, "0") // 3 of 5: a quorum
	want(2, "a quorum of copies after an early delivery")
	copyOn(2, "0")
	copyOn(3, "0")
	want(2, "every copy of the real release")
	if st := h.Stats(); st.HeldTimeouts != 1 || st.HeldRedelivered != 1 {
		t.Fatalf("HeldTimeouts %d, HeldRedelivered %d; want 1 and 1", st.HeldTimeouts, st.HeldRedelivered)
	}

	// A message whose quorum of copies straddles HoldBack (two masters
	// of five in time, a third late: a paused or slow master) is
	// delivered on HoldBack and again when the quorum is complete.
	do(t, masters[0], "PUBLISH", "ch", "x")
	do(t, masters[1], "PUBLISH", "ch", "x")
	waitFor(t, "x delivered on HoldBack", func() bool { return rec.len() == 3 })
	fenced(t, h)
	dups = h.Stats().Duplicates
	copyOn(2, "x")
	want(4, "x's quorum completed after HoldBack")
	copyOn(3, "x")
	want(4, "x's fourth copy")

	// One that had its quorum in time: the late copies of the other
	// masters (paused ones) deliver nothing more.
	onEvery(masters[:3], func(m *redisproc.Server) { do(t, m, "PUBLISH", "ch", "y") })
	waitFor(t, "y on its quorum", func() bool { return rec.len() == 5 })
	dups = h.Stats().Duplicates
	copyOn(3, "y")
	copyOn(4, "y")
	want(5, "late copies of a message delivered on its quorum")
	// And one only a minority published: once, on HoldBack.
	do(t, masters[3], "PUBLISH", "ch", "z")
	copyOn(4, "z")
	waitFor(t, "z on HoldBack", func() bool { return rec.len() == 6 })
	want(6, "a minority's message")
	if got := rec.payloads(); !slices.Equal(got, []string{"ch=0", "ch=0", "ch=x", "ch=x", "ch=y", "ch=z"}) {
		t.Fatalf("delivered %v", got)
	}
	if st := h.Stats(); st.HeldTimeouts != 3 || st.HeldRedelivered != 2 {
		t.Fatalf("HeldTimeouts %d, HeldRedelivered %d; want 3 and 2", st.HeldTimeouts, st.HeldRedelivered)
	}
}
