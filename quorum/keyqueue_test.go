package quorum

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// failAll answers r's command on every master with a connection error, as
// the fake masters of these tests do for whatever runs: r is decided
// (NOQUORUM) and the next request on its key is dispatched.
func failAll(e *Engine, r *Request) {
	for i := 0; i < e.n; i++ {
		r.Complete(i, resp.Reply{}, down)
	}
}

// sentTo returns the requests master 0 was sent, in order.
func sentTo(fp *fakePipe) []*Request {
	var out []*Request
	for _, op := range fp.sent() {
		if r, ok := op.C.(*Request); ok && r != nil {
			out = append(out, r)
		}
	}
	return out
}

// runQueue answers every request as it is dispatched until until is
// decided, and returns the requests in the order they reached the masters.
func runQueue(t *testing.T, e *Engine, fps []*fakePipe, until *Request) []*Request {
	t.Helper()
	for step := 0; !until.Decided(); step++ {
		sent := sentTo(fps[0])
		var inFlight *Request
		for _, r := range sent {
			if !r.Decided() {
				inFlight = r
			}
		}
		if inFlight == nil || step > 100000 {
			t.Fatal("nothing in flight, and the request waited for is not decided")
		}
		failAll(e, inFlight)
	}
	return sentTo(fps[0])
}

func indexOf(rs []*Request, r *Request) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}

// TestReadsCannotStarveQueuedSetNX: reads of other connections go ahead of
// a queued SET NX (as releases do), but at most maxOvertake of them: a
// stream of GETs kept in flight delayed a SET NX on a free key for as long
// as it lasted, until its validity ran out (review, helper-59). Drop the
// maxOvertake check in keyTable.enter to see the SET NX sent last.
func TestReadsCannotStarveQueuedSetNX(t *testing.T) {
	e, fps := pipedEngine(3, 0)
	defer e.timers.close()
	e.cfg.NodeTimeout = time.Minute // no deadline decides anything here
	holder := e.Get([]byte("k"), batching.Now())
	e.Submit(NewWaiter(), holder)
	nx, _ := setNX(e, "k", "tok")
	reader := NewWaiter()
	var reads []*Request
	for range 100 {
		r := e.Get([]byte("k"), batching.Now())
		e.Submit(reader, r)
		reads = append(reads, r)
	}
	order := runQueue(t, e, fps, nx)
	at := indexOf(order, nx)
	if at < 0 || at > 1+maxOvertake {
		t.Fatalf("the SET NX reached the masters as request #%d, after %d reads queued after it; want at most %d ahead of it", at, at-1, maxOvertake)
	}
	// The reads that did not go ahead run after it, in their order.
	last := reads[len(reads)-1]
	order = runQueue(t, e, fps, last)
	for i, r := range reads {
		if got := indexOf(order, r); got < 0 || (i > 0 && got < indexOf(order, reads[i-1])) {
			t.Fatalf("read #%d ran at %d, out of its connection's order", i, got)
		}
	}
}

// TestKeyQueueBounded: at most maxKeyQueue requests wait for one key, of
// which at most half reads and acquisitions; the next is refused at once
// with an error that says so, and is not sent.
// 30 connections x 2000 pipelined PTTL queued 60,000 round trips on one
// key (review, helper-59). Remove the queueFull check to see it fail.
func TestKeyQueueBounded(t *testing.T) {
	e, fps := pipedEngine(3, 0)
	defer e.timers.close()
	e.cfg.NodeTimeout = time.Minute // no deadline decides anything here
	holder := e.Get([]byte("k"), batching.Now())
	e.Submit(NewWaiter(), holder)
	var rs []*Request
	for range maxKeyQueue/2 + 10 {
		r := e.PTTL([]byte("k"), batching.Now())
		e.Submit(NewWaiter(), r) // one connection each: a flood
		rs = append(rs, r)
	}
	for i, r := range rs {
		if i < maxKeyQueue/2 {
			if r.Decided() {
				t.Fatalf("request #%d decided while it should wait: %v", i, r.err)
			}
			continue
		}
		if !r.Decided() || r.err == nil || !strings.HasPrefix(r.err.Error(), "ERR too many requests wait for this key") {
			t.Fatalf("read #%d past half the bound: decided %v, err %v; want refused", i, r.Decided(), r.err)
		}
	}
	// Reads filled their half: a holder's release (a DEL here) still
	// finds room, up to the bound.
	for i := maxKeyQueue / 2; i < maxKeyQueue+10; i++ {
		r := e.Del([][]byte{[]byte("k")}, batching.Now())
		e.Submit(NewWaiter(), r)
		if full := r.Decided(); full != (i >= maxKeyQueue) {
			t.Fatalf("DEL with %d requests waiting: refused %v (%v)", i, full, r.err)
		}
	}
	// One connection's own pipeline is not a flood: its requests do not
	// count against its later ones (its read-ahead bounds them), and all
	// of them wait, as on Redis (review, helper-64).
	e.Submit(NewWaiter(), e.Get([]byte("k2"), batching.Now()))
	w := NewWaiter()
	for i := range maxKeyQueue + 10 {
		r := e.PTTL([]byte("k2"), batching.Now())
		e.Submit(w, r)
		if r.Decided() {
			t.Fatalf("one connection's PTTL #%d refused: %v", i, r.err)
		}
	}
	if n := len(sentTo(fps[0])); n != 2 {
		t.Fatalf("%d requests sent, want only the two running ones", n)
	}
}

// TestAbandonedQueuedRequestsNotSent: a client that pipelined reads and
// SET NX on a busy key and hung up (Abandon) costs the key no round trip
// for them: after the attackers of the review closed, their queued reads
// still ran one round trip at a time, and a SET NX waited 63 s. Its
// release still runs, as Redis runs the commands it has read. Make Abandon
// a no-op to see the reads sent.
func TestAbandonedQueuedRequestsNotSent(t *testing.T) {
	e, fps := pipedEngine(3, 0)
	defer e.timers.close()
	e.cfg.NodeTimeout = time.Minute // no deadline decides anything here
	holder := e.Get([]byte("k"), batching.Now())
	e.Submit(NewWaiter(), holder)
	gone := NewWaiter()
	var dropped []*Request
	for range 50 {
		r := e.PTTL([]byte("k"), batching.Now())
		e.Submit(gone, r)
		dropped = append(dropped, r)
	}
	nx := e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now())
	e.Submit(gone, nx)
	dropped = append(dropped, nx)
	rel := e.Del([][]byte{[]byte("k")}, batching.Now())
	e.Submit(gone, rel)
	gone.Abandon()
	other := e.Get([]byte("k"), batching.Now())
	e.Submit(NewWaiter(), other)
	order := runQueue(t, e, fps, other)
	for i, r := range dropped {
		if !r.Decided() || r.err != ErrClientGone {
			t.Fatalf("request #%d of the closed connection: decided %v, err %v; want ErrClientGone", i, r.Decided(), r.err)
		}
		if indexOf(order, r) >= 0 {
			t.Fatalf("request #%d of the closed connection was sent", i)
		}
	}
	if indexOf(order, rel) < 0 {
		t.Fatal("the closed connection's DEL was not sent")
	}
	if len(order) != 3 {
		t.Fatalf("%d requests sent; want the running one, the DEL and the other client's GET", len(order))
	}
}

// TestQueuedPastValidityIsAnError: an acquisition whose validity ran out
// while it waited behind its key is not sent, and its client hears why:
// it answered nil ("held") before, on a key that may be free (review,
// helper-59). Put lostReply back in dispatch to see the nil.
func TestQueuedPastValidityIsAnError(t *testing.T) {
	e, fps := pipedEngine(3, 0)
	defer e.timers.close()
	e.cfg.NodeTimeout = time.Minute // no deadline decides anything here
	holder := e.Get([]byte("k"), batching.Now())
	e.Submit(NewWaiter(), holder)
	// Parsed 30ms ago with a 20ms TTL: its validity is gone when its turn
	// comes.
	nx := e.Acquire([]byte("k"), []byte("tok"), 20*time.Millisecond, batching.Now()-int64(30*time.Millisecond))
	e.Submit(NewWaiter(), nx)
	runQueue(t, e, fps, nx)
	rep, err := nx.Result()
	if err == nil || !strings.Contains(err.Error(), "waited") || !strings.Contains(err.Error(), "past its validity") {
		t.Fatalf("reply %v, err %v; want an error saying it waited past its validity", rep, err)
	}
	if nx.Outcome() == Refused {
		t.Fatal("outcome Refused: the client would read the key as held")
	}
	if indexOf(sentTo(fps[0]), nx) >= 0 {
		t.Fatal("sent with no validity left")
	}
}
