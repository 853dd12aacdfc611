package quorum

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestLateUndoAfterAReleaseThatErred: a release of the same token that
// answered an error on the slow master (NOREPLICAS, a script error) deleted
// nothing there, so it does not hold the failed attempt's late undo back:
// the undo is sent, and the token does not stay on master 4 until its TTL.
func TestLateUndoAfterAReleaseThatErred(t *testing.T) {
	const tok = "tokA"
	e, ms := lockEngine(t)
	ms[0].val, ms[1].val, ms[2].val = "B", "B", "B"
	p1, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		ms[i].step()
	}
	e.Wait(w)
	if p1.reply.Type != resp.Nil {
		t.Fatalf("P1: %v %v", p1.reply, p1.err)
	}
	ms[3].drain() // P1's undo on 3, at the decision
	// The library releases after the failed attempt (redsync does).
	_, w = submitRel(e, "k", tok)
	for i := 0; i < 4; i++ {
		ms[i].step()
	}
	e.Wait(w)
	// Master 4 resumes: P1 writes tok (late yes), the release is refused
	// with an error reply that is not in unavailable().
	ms[4].step()
	if ms[4].val != tok {
		t.Fatalf("model: P1 did not write on 4")
	}
	ops := ms[4].fp.sent()
	rel := ops[ms[4].ran]
	ms[4].ran++
	rel.C.Complete(4, resp.Reply{Type: resp.Error, Str: []byte("NOREPLICAS Not enough good replicas to write.")}, nil)
	ms[4].drain() // the late undo, if any
	if ms[4].val == tok {
		t.Fatalf("the release answered an error on master 4 (it deleted nothing), yet the late undo was held back as 'cleared': %q left until its TTL", ms[4].val)
	}
}
