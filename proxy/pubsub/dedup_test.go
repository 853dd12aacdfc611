package pubsub

import (
	"fmt"
	"testing"
	"time"
)

// copyOf is one master's copy of a message, as it reaches the hub.
type copyOf struct {
	master  int
	payload string
}

// run feeds copies to a dedup of record r (confirmed on masters) and
// returns the payloads it delivered, in order.
func run(d *dedup, r *record, copies []copyOf) []string {
	var out []string
	for _, c := range copies {
		if _, isNew := d.admit(r, c.master, d.hash(r.key.name, []byte(c.payload)), r.confirmed); isNew {
			out = append(out, c.payload)
		}
	}
	return out
}

func newDedup(window time.Duration, max int) *dedup {
	d := &dedup{}
	d.init(&Config{DedupWindow: window, MaxDedupEntries: max})
	return d
}

func TestDedupOrders(t *testing.T) {
	A, B, C := 0, 1, 2
	cases := []struct {
		name   string
		copies []copyOf
		want   []string
	}{
		{"one message, three copies", []copyOf{{A, "x"}, {B, "x"}, {C, "x"}}, []string{"x"}},
		{"two identical in a row, master by master",
			[]copyOf{{A, "x"}, {A, "x"}, {B, "x"}, {B, "x"}, {C, "x"}, {C, "x"}}, []string{"x", "x"}},
		{"two identical interleaved",
			[]copyOf{{A, "x"}, {B, "x"}, {A, "x"}, {C, "x"}, {B, "x"}, {C, "x"}}, []string{"x", "x"}},
		{"distinct payloads, any order",
			[]copyOf{{B, "y"}, {A, "x"}, {A, "y"}, {C, "x"}, {B, "x"}, {C, "y"}}, []string{"y", "x"}},
		{"first published on A and B only (lock held on a quorum), second everywhere",
			// C's copy of the second message joins the first one, which C
			// never sent; the second is still delivered, by A's copy.
			[]copyOf{{A, "x"}, {B, "x"}, {C, "x"}, {A, "x"}, {B, "x"}}, []string{"x", "x"}},
		{"two quorums always share a master: no loss",
			// first on A,B; second on B,C; C is fastest with the second.
			[]copyOf{{A, "x"}, {C, "x"}, {B, "x"}, {B, "x"}}, []string{"x", "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDedup(time.Minute, 100)
			r := &record{key: recKey{Channel, "ch"}, confirmed: 0b111}
			if got := run(d, r, c.copies); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("delivered %q, want %q", got, c.want)
			}
		})
	}
}

func TestDedupSettlesAndForgets(t *testing.T) {
	d := newDedup(time.Minute, 100)
	r := &record{key: recKey{Channel, "ch"}, confirmed: 0b111}
	run(d, r, []copyOf{{0, "x"}, {1, "x"}, {2, "x"}})
	if d.n != 0 || len(r.fifo) != 0 {
		t.Fatalf("entries left after every master delivered: %d, fifo %v", d.n, r.fifo)
	}
	// A master that goes down owes nothing any more.
	run(d, r, []copyOf{{0, "y"}, {1, "y"}})
	d.masterDown(2)
	if d.n != 0 {
		t.Fatalf("entries left after the owing master went down: %d", d.n)
	}
	// And its next message, published after it came back, is new.
	if got := run(d, r, []copyOf{{2, "z"}}); len(got) != 1 {
		t.Fatalf("a restarted master's message was taken for a copy")
	}
}

func TestDedupWindow(t *testing.T) {
	d := newDedup(20*time.Millisecond, 100)
	r := &record{key: recKey{Channel, "ch"}, confirmed: 0b11}
	run(d, r, []copyOf{{0, "x"}})
	d.start = d.start.Add(-30 * time.Millisecond) // 30ms pass
	if got := run(d, r, []copyOf{{1, "x"}}); len(got) != 1 {
		t.Fatalf("a copy later than the window was dropped; it should be delivered again")
	}
	if d.unpaid != 1 {
		t.Fatalf("unpaid = %d, want 1", d.unpaid)
	}
}

func TestDedupMemoryBound(t *testing.T) {
	d := newDedup(time.Minute, 4)
	r := &record{key: recKey{Channel, "ch"}, confirmed: 0b111}
	for i := range 10 {
		run(d, r, []copyOf{{0, fmt.Sprint(i)}}) // B and C never send theirs
	}
	if d.n != 4 || d.evicted != 6 {
		t.Fatalf("entries %d evicted %d, want 4 and 6", d.n, d.evicted)
	}
	// The oldest were forgotten: their late copies are delivered again,
	// the newest are still recognized.
	if got := run(d, r, []copyOf{{1, "0"}, {1, "9"}}); fmt.Sprint(got) != "[0]" {
		t.Fatalf("late copies delivered %q, want [0]", got)
	}
}

func TestDedupDropRecord(t *testing.T) {
	d := newDedup(time.Minute, 100)
	r1 := &record{key: recKey{Channel, "a"}, confirmed: 0b11}
	r2 := &record{key: recKey{Pattern, "*"}, confirmed: 0b11}
	run(d, r1, []copyOf{{0, "x"}, {0, "y"}})
	run(d, r2, []copyOf{{0, "x"}})
	d.dropRecord(r1)
	if d.n != 1 || d.head.rec != r2 || d.tail.rec != r2 {
		t.Fatalf("after dropping a record: %d entries", d.n)
	}
}

// TestDedupMasterConfirmedLate: a client is told it is subscribed once a
// quorum of masters confirmed; the last master may already be subscribed,
// and publish, before the hub has read its confirmation. Its copies must
// join the messages the others' copies started, or the last one is
// delivered twice (TestSubscribeRESP2 saw a 21st of 20 identical
// messages). Each message is started by A, C confirmed only later.
func TestDedupMasterConfirmedLate(t *testing.T) {
	A, B, C := 0, 1, 2
	d := newDedup(time.Minute, 100)
	r := &record{key: recKey{Channel, "ch"}, confirmed: 0b011}
	up := uint16(0b111) // C's connection is up: its confirmation is on its way
	var delivered int
	feed := func(master int) {
		if _, isNew := d.admit(r, master, d.hash("ch", []byte("0")), r.confirmed|up); isNew {
			delivered++
		}
	}
	feed(A)
	feed(B)
	r.confirmed |= 1 << C // C's confirmation read, then its copy
	feed(C)
	for range 19 {
		feed(A)
		feed(B)
		feed(C)
	}
	if delivered != 20 {
		t.Fatalf("%d messages delivered for 20 published", delivered)
	}
	if d.n != 0 {
		t.Fatalf("%d entries left owing copies", d.n)
	}
}
