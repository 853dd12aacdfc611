package resp

import (
	"strings"
	"testing"
)

// TestInputBudgetEvictsTheBiggest: past the limit, the guard holding the
// most goes: another one (interrupted, its memory counted as leaving), or
// the one asking, whose growth is then refused.
func TestInputBudgetEvictsTheBiggest(t *testing.T) {
	b := NewBudget(10000)
	interrupted := map[string]int{}
	guard := func(name string) *Guard {
		g := &Guard{}
		g.Interrupt = func() { interrupted[name]++ }
		return g
	}
	big, mid, small, late := guard("big"), guard("mid"), guard("small"), guard("late")
	for _, c := range []struct {
		g *Guard
		n int64
	}{{big, 6000}, {mid, 3000}} {
		if !b.charge(c.g, c.n) {
			t.Fatalf("charge %d within the limit refused", c.n)
		}
	}
	if !b.charge(small, 2000) || interrupted["big"] != 1 || !big.evicting.Load() || b.evicted.Load() != 1 {
		t.Fatalf("over the limit: small refused or big not evicted (%v, evicted %d)", interrupted, b.evicted.Load())
	}
	// What big still holds is leaving: 5000 more fit beside mid and small.
	if !b.charge(late, 5000) || len(interrupted) != 1 {
		t.Fatalf("memory of an evicted connection counted as staying: %v", interrupted)
	}
	b.Release(big)
	if got := b.used.Load(); got != 10000 {
		t.Fatalf("used = %d after big's release, want 10000", got)
	}
	// The one asking holds the most: its growth is refused, nothing evicted.
	if b.charge(late, 4000) || late.held.Load() != 5000 || b.used.Load() != 10000 || len(interrupted) != 1 {
		t.Fatalf("the biggest asking for more: held %d, used %d, %v", late.held.Load(), b.used.Load(), interrupted)
	}
	if msg := b.Error(5000).Reply(); !strings.Contains(msg, "reached 10000 bytes (client_query_buffer_total in config.toml), and this connection holds the most (5000 bytes)") {
		t.Fatalf("reply %q", msg)
	}
	// Released guards give everything back and charge nothing more.
	for _, g := range []*Guard{mid, small, late} {
		b.Release(g)
	}
	if b.used.Load() != 0 || b.charge(mid, 1) {
		t.Fatalf("after every release: used %d, a closed guard charged", b.used.Load())
	}
}

// TestBudgetKept: what a connection keeps besides its input counts in the
// budget and in the choice of the one to close, apart in Kept, and goes
// back with the connection.
func TestBudgetKept(t *testing.T) {
	b := NewBudget(10000)
	interrupted := 0
	in, out := &Guard{Budget: b}, &Guard{Budget: b, Interrupt: func() { interrupted++ }}
	if !b.charge(in, 3000) || !out.Keep(6000) || b.Kept() != 6000 || b.Used() != 9000 {
		t.Fatalf("within the limit: used %d, kept %d", b.Used(), b.Kept())
	}
	// Over the limit, the one holding the most in replies is closed.
	if !b.charge(in, 2000) || interrupted != 1 || !out.Evicting() {
		t.Fatalf("input past the limit did not evict the connection keeping the most (%d)", interrupted)
	}
	b.Release(out)
	if b.Kept() != 0 || b.Used() != 5000 {
		t.Fatalf("after its release: used %d, kept %d; want 5000 and 0", b.Used(), b.Kept())
	}
	// Keeping more than the rest allows, while holding the most: refused.
	late := &Guard{Budget: b}
	if !late.Keep(3000) || late.Keep(5000) || late.Held() != 3000 || b.Kept() != 3000 {
		t.Fatalf("the biggest keeping more: held %d, kept %d", late.Held(), b.Kept())
	}
	if !late.Keep(-3000) || b.Kept() != 0 || b.Used() != 5000 {
		t.Fatalf("given back: used %d, kept %d", b.Used(), b.Kept())
	}
}
