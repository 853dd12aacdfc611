package pubsub

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// copyRead publishes payload on one master and waits until the hub has
// read that copy (the count of messages r holds, or has delivered, grew).
func copyRead(t *testing.T, h *Hub, rec *recorder, m *redisproc.Server, payload string) {
	t.Helper()
	before := progress(h, rec)
	do(t, m, "PUBLISH", "ch", payload)
	waitFor(t, "the copy of "+payload+" read", func() bool { return progress(h, rec) > before })
}

// progress grows with every copy the hub reads of channel ch: held and
// delivered messages and dropped duplicates.
func progress(h *Hub, rec *recorder) int {
	h.mu.Lock()
	n := int(h.dd.dups)
	if r := h.recs[recKey{Channel, "ch"}]; r != nil {
		n += len(r.holdq)
	}
	h.mu.Unlock()
	return n + rec.len()
}

// TestPublishOrderWhenAMasterMissedOne: a client publishes 10 then 11;
// PUBLISH 10 misses master 2 (its deadline passed before it was written
// there), so master 2's first copy is 11's, and the hub reads it before
// any copy of 10. Masters 0 and 1 send 10 before 11, which tells the hub
// the order: 11, ready on its quorum (masters 2 and 0), waits until 10 is
// delivered. Before, messages went out in the order first seen, and the
// subscriber got 11 before 10.
func TestPublishOrderWhenAMasterMissedOne(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	cfg := testConfig(t, masters)
	cfg.HoldBack = 5 * time.Second // every quorum below comes in time
	h := startHub(t, cfg)
	rec := &recorder{}
	subscribe(t, h, rec, Channel, "ch", 3)

	copyRead(t, h, rec, masters[2], "11")
	copyRead(t, h, rec, masters[0], "10")
	copyRead(t, h, rec, masters[0], "11") // 11's quorum
	copyRead(t, h, rec, masters[1], "10") // 10's quorum
	copyRead(t, h, rec, masters[1], "11")
	waitFor(t, "both messages", func() bool { return rec.len() == 2 })
	if got := rec.payloads(); !slices.Equal(got, []string{"ch=10", "ch=11"}) {
		t.Fatalf("delivered %v, want 10 then 11 (the order masters 0 and 1 ran the publishes)", got)
	}
	if st := h.Stats(); st.HeldTimeouts != 0 {
		t.Fatalf("HeldTimeouts %d, want 0", st.HeldTimeouts)
	}
}

// inject hands the hub a copy from master i as its reader would, in the
// order the test gives: copies ordered across masters, which the network
// does not let a test choose.
func inject(h *Hub, i int, payload string) {
	h.mu.Lock()
	h.onMessage(i, Channel, "", "ch", []byte(payload))
	h.mu.Unlock()
}

// TestOrderAgreesWithEveryMaster feeds copies in racing orders: the
// messages of one subscription go out in the order the masters ran the
// publishes, as far as a master sent both, and a message read late that
// moves ahead of a later publish takes along those a master sent before
// it.
func TestOrderAgreesWithEveryMaster(t *testing.T) {
	masters := redisproc.ForTest(t, 5)
	for _, tc := range []struct {
		name   string
		n      int      // masters
		copies []string // "<master>:<payload>", in the order read
		want   []string // nil: p and q in either order
	}{
		// The client published 10, 11; 10 missed master 2.
		{"a master missed the first", 3, []string{"2:11", "0:10", "0:11", "1:10", "1:11"}, []string{"10", "11"}},
		{"read in publish order", 3, []string{"0:10", "2:11", "0:11", "1:10", "1:11"}, []string{"10", "11"}},
		// y, x, e: y ran on master 1 alone, x on masters 1 and 2, e on 0
		// and 2, and master 0's e was read first. x moves ahead of e, and
		// y with it (master 1 sent it first): y goes out on HoldBack,
		// then x and e.
		{"predecessors move too", 3, []string{"0:e", "1:y", "1:x", "2:x", "2:e"}, []string{"y", "x", "e"}},
		// x, a, b of five masters: x ran on master 1, a on 0 and 1, b on
		// 2, 3 and 4. a was first seen before b, and x after both; x
		// moves ahead of a, and b, which has its quorum, stays behind a
		// (moving a behind x would put b first).
		{"the late one moves", 5, []string{"0:a", "2:b", "1:x", "1:a", "3:b", "4:b"}, []string{"x", "a", "b"}},
		// Masters 0 and 2 ran p then q, master 1 q then p (two clients
		// publishing at once): no order agrees with all; both go out,
		// once each.
		{"masters disagree", 3, []string{"0:p", "1:q", "1:p", "0:q", "2:p", "2:q"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, masters[:tc.n])
			cfg.HoldBack = 200 * time.Millisecond
			h := startHub(t, cfg)
			rec := &recorder{}
			subscribe(t, h, rec, Channel, "ch", tc.n)
			for _, c := range tc.copies {
				inject(h, int(c[0]-'0'), c[2:])
			}
			want := tc.want
			if want == nil {
				want = []string{"p", "q"}
			}
			waitFor(t, "every message", func() bool { return rec.len() == len(want) })
			time.Sleep(300 * time.Millisecond) // past HoldBack: nothing more
			var got []string
			for _, m := range rec.got() {
				got = append(got, string(m.Payload))
			}
			if tc.want == nil {
				slices.Sort(got)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.heldBytes != 0 {
				t.Fatalf("%d held bytes left", h.heldBytes)
			}
		})
	}
}

// stamped is a Subscriber that notes, with each message, how many copies
// the test had handed the hub by then (Deliver runs under h.mu, as
// injectOn does).
type stamped struct {
	read *int
	got  []string
	at   []int
}

func (s *stamped) Deliver(m Message) {
	s.got = append(s.got, string(m.Payload))
	s.at = append(s.at, *s.read)
}

// TestOrderRandomPublishes: one client publishes messages one after
// another, each on a random subset of masters (the others missed it),
// and the hub reads the masters' copies interleaved at random, each
// master's in its order. Every message is delivered once, and b never
// before a published earlier when the hub had read, before b went out, a
// copy of b from a master that ran both (docs/pubsub.md, "In what
// order").
func TestOrderRandomPublishes(t *testing.T) {
	masters := redisproc.ForTest(t, 5)
	for _, n := range []int{3, 5} {
		cfg := testConfig(t, masters[:n])
		cfg.HoldBack = 100 * time.Millisecond
		h := startHub(t, cfg)
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		for trial := range 30 {
			ch := fmt.Sprint("ch", trial)
			read := 0
			sub := &stamped{read: &read}
			subscribe(t, h, sub, Channel, ch, n)
			const nmsg = 8
			ran := make([][]int, n) // per master: the messages it ran, in order
			for msg := range nmsg {
				k := rng.IntN(n) // it ran on at least one master
				for i := range n {
					if i == k || rng.IntN(3) > 0 {
						ran[i] = append(ran[i], msg)
					}
				}
			}
			var readAt [][]int // per master, per message: the copy's number, -1 if not ran
			for range n {
				readAt = append(readAt, slices.Repeat([]int{-1}, nmsg))
			}
			next := make([]int, n)
			for {
				var ready []int
				for i := range n {
					if next[i] < len(ran[i]) {
						ready = append(ready, i)
					}
				}
				if len(ready) == 0 {
					break
				}
				i := ready[rng.IntN(len(ready))]
				msg := ran[i][next[i]]
				next[i]++
				h.mu.Lock()
				read++
				readAt[i][msg] = read
				h.onMessage(i, Channel, "", ch, []byte(fmt.Sprint(msg)))
				h.mu.Unlock()
			}
			waitFor(t, "every message of "+ch, func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return len(sub.got) == nmsg
			})
			h.mu.Lock()
			got, at := slices.Clone(sub.got), slices.Clone(sub.at)
			h.mu.Unlock()
			pos := map[string]int{}
			for k, p := range got {
				pos[p] = k
			}
			if len(pos) != nmsg {
				t.Fatalf("%d masters, %s: delivered %v, want each of %d once", n, ch, got, nmsg)
			}
			for b := range nmsg {
				out := at[pos[fmt.Sprint(b)]] // copies read when b went out
				for a := range b {
					for i := range n {
						if readAt[i][a] > 0 && readAt[i][b] > 0 && readAt[i][b] <= out && pos[fmt.Sprint(a)] > pos[fmt.Sprint(b)] {
							t.Fatalf("%d masters, %s: delivered %v; %d before %d though master %d's copies of both were read (masters ran %v)", n, ch, got, b, a, i, ran)
						}
					}
				}
			}
			h.Unsubscribe(sub, Channel, ch)
		}
	}
}
