package pubsub

import (
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestHeldUntilQuorum: a message is delivered once a quorum of masters
// published it (a release that ran on a quorum), not on the first copy; one
// published on a single master is delivered HoldBack later; messages of a
// subscription keep the order they were first seen in. Make onCopy deliver
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
