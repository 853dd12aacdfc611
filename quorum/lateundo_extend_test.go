package quorum

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// refusingPipe is a fakePipe that can refuse submissions (queue full, down).
type refusingPipe struct {
	*fakePipe
	refuse bool
}

func (p *refusingPipe) Submit(op batching.Op) error {
	if p.refuse {
		return batching.ErrQueueFull
	}
	return p.fakePipe.Submit(op)
}

// TestLateUndoAfterAnExtendThatCountedIt: a client's SET NX (P1) is refused
// while master 4 is paused; its retry P2 (same token) is granted on masters
// 0-3. The client then extends its lock (Redisson's watchdog, redlock's
// extend: compare-and-pexpire of its token). Master 4 resumes and runs P1
// (writes the token), P2 (nil, or never sent there), then the extend, which
// finds the token and answers 1 in time: the extend counts master 4 in its
// quorum. P1's late undo is queued after the extend (immediately when P1's
// late reply arrives, or, deferred since dafde7e, when P2's nil arrives) and
// deletes the token the extend counted. With masters 0 and 1 slow for the
// extend (paused until the first TTL ran out), the extended lock is left on
// masters 2 and 3 only: a stranger wins 0, 1 and 4 while the client's
// extension is still valid.
func TestLateUndoAfterAnExtendThatCountedIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		retryTo4 bool
	}{
		{"retry queued on the paused master (deferred undo)", true},
		{"retry not sent to the paused master (immediate late undo)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const tok = "tokA"
			e, fps := pipedEngine(5, -1)
			rp := &refusingPipe{fakePipe: fps[4]}
			e.pipes[4] = rp
			ms := make([]*lockMaster, 5)
			for i := range ms {
				ms[i] = &lockMaster{fp: fps[i], i: i}
			}
			ms[1].val, ms[2].val, ms[3].val = "B", "B", "B"
			// P1: refused by B's lock; master 4 paused.
			p1, w := setNX(e, "k", tok)
			for i := 0; i < 4; i++ {
				ms[i].drain()
			}
			if !p1.Decided() {
				p1.expire()
			}
			e.Wait(w)
			for i := 0; i < 4; i++ { // P1's undo on master 0
				ms[i].drain()
			}
			if p1.reply.Type != resp.Nil {
				t.Fatalf("P1: %v %v", p1.reply, p1.err)
			}
			ms[1].val, ms[2].val, ms[3].val = "", "", "" // B released
			// P2: the client's retry, granted on 0-3.
			rp.refuse = !tc.retryTo4
			p2, w := setNX(e, "k", tok)
			rp.refuse = false
			for i := 0; i < 4; i++ {
				ms[i].drain()
			}
			e.Wait(w)
			if !p2.reply.IsOK() {
				t.Fatalf("P2: %v %v", p2.reply, p2.err)
			}
			// E: the client extends its lock.
			w = NewWaiter()
			ext := &Request{kind: Extend, agg: AggVote, rule: &YesOne, nkeys: 1, Key: "k",
				cmd:   resp.AppendCommand(nil, []byte("EXT"), []byte("k"), []byte(tok)),
				token: []byte(tok), TTL: 10 * time.Second,
				noRk: rkZero, t0: batching.Now()}
			e.Submit(w, ext)
			// Masters 0 and 1 are now paused; master 4 resumes and runs its
			// backlog, then 2 and 3 answer the extend.
			ms[4].drain()
			ms[2].drain()
			ms[3].drain()
			if !ext.Decided() {
				ext.expire()
			}
			e.Wait(w)
			if ext.err != nil || ext.reply.Int != 1 {
				t.Skipf("extend not granted (%v %v): nothing to check", ext.reply, ext.err)
			}
			ms[4].drain() // whatever the late replies queued there (the undo)
			// Masters 0 and 1 resume after P2's TTL: their copy expired, the
			// extend finds nothing.
			ms[0].val, ms[1].val = "", ""
			ms[0].drain()
			ms[1].drain()
			holders := 0
			for _, m := range ms {
				if m.val == tok && m.ext {
					holders++
				}
			}
			t.Logf("extend granted, validity %v; extended token on %d masters (4: %q)", ext.validity, holders, ms[4].val)
			if holders < e.Q() {
				t.Fatalf("the extend was granted counting master 4's yes, then P1's late undo deleted the token there: the extended lock is on %d masters (< quorum %d), a stranger can win k", holders, e.Q())
			}
		})
	}
}

var _ = errors.New
