package quorum

import "testing"

// TestDeferredLateUndoSkippedWhenStale: a late undo held back behind a
// later attempt of the same token through this proxy (supersede.go) is
// sent when that attempt turns out to have written nothing. If that
// comes long after the first attempt arrived, the first attempt's copy
// may have expired meanwhile and the token been granted again through
// another lockproxy (a client retrying with its token behind a load
// balancer): the undo would delete that grant's copy. Here this proxy
// stalls for the whole TTL (its requests' T0 moved back by it) while
// master 1 runs the first attempt (writes), loses the copy to its TTL,
// takes the other proxy's grant of the token, then runs the second
// attempt (nil, the token is there): the first attempt's undo must not
// follow.
func TestDeferredLateUndoSkippedWhenStale(t *testing.T) {
	const tok = "host-1"
	e, fps := pipedEngine(3, -1)
	ms := make([]*modelMaster, 3)
	for i := range ms {
		ms[i] = &modelMaster{fp: fps[i], i: i}
	}
	settle := func(r *Request, w *Waiter) {
		t.Helper()
		if !r.Decided() {
			r.expire() // masters 1 and 2 are paused: node_timeout passes
		}
		e.Wait(w)
	}
	// Two attempts of the token while masters 1 and 2 are paused: each
	// wins only master 0 (undone there at once) and fails.
	p1, w := setNX(e, "k", tok)
	for ms[0].step2() {
	}
	settle(p1, w)
	p2, w := setNX(e, "k", tok)
	for ms[0].step2() {
	}
	settle(p2, w)
	if p1.Outcome() == Granted || p2.Outcome() == Granted {
		t.Fatalf("attempts with one master of three answering were granted: %v %v", p1.Outcome(), p2.Outcome())
	}
	// This proxy stalls for the TTL before it reads master 1's replies.
	p1.t0 -= int64(p1.TTL)
	p2.t0 -= int64(p2.TTL)
	if !ms[1].step2() { // the first attempt: writes; its undo waits for the second
		t.Fatal("master 1 had no first attempt to run")
	}
	ms[1].val = ""  // the copy expired
	ms[1].val = tok // the client's retry through another proxy, granted with masters 1 and 2
	ms[2].val = tok
	for ms[1].step2() { // the second attempt (nil), then whatever it released
	}
	if ms[1].val != tok {
		t.Fatalf("master 1 after this proxy's late replies: %q; the stale undo deleted the other proxy's grant of the token", ms[1].val)
	}
}
