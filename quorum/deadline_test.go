package quorum

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestSettledRequestRecycledBeforeItsDeadline: a request decided with every
// master's reply in needs its deadline no more; it is recycled as soon as
// its submitter releases it, not node_timeout later when its deadline
// would have come (keeping every request of the last node_timeout alive
// made the engine's working set too big for the CPU's cache).
func TestSettledRequestRecycledBeforeItsDeadline(t *testing.T) {
	r, _, recycled := grantedByFirst(t, 5)
	if !r.Decided() {
		t.Fatal("5 yes: not decided")
	}
	r.Release()
	select {
	case got := <-recycled:
		if got != r {
			t.Fatal("another request was recycled")
		}
	default:
		t.Fatal("a settled, released request was kept until its deadline (node_timeout 1h)")
	}
}

// TestDecidedRequestWithAMasterOutstanding: a request decided while a
// master has not answered is not recycled under that master's op (its late
// reply still arrives to it), and is recycled once that reply came, still
// without waiting for its deadline.
func TestDecidedRequestWithAMasterOutstanding(t *testing.T) {
	r, fps, recycled := grantedByFirst(t, 4)
	if !r.Decided() {
		t.Fatal("4 yes: not decided")
	}
	r.Release()
	select {
	case <-recycled:
		t.Fatal("recycled while master 4's reply is still to come")
	default:
	}
	answer(fps, 4, resp.ReplyOK, nil) // drops the last reference
	select {
	case got := <-recycled:
		if got != r {
			t.Fatal("another request was recycled")
		}
	default:
		t.Fatal("kept until its deadline (node_timeout 1h) after every master answered")
	}
}

// grantedByFirst submits a SET NX to 5 fake masters with node_timeout 1h
// and has the first n answer OK; recycled receives each request recycled.
func grantedByFirst(t *testing.T, n int) (*Request, []*fakePipe, chan *Request) {
	e, fps := pipedEngine(5, -1)
	e.cfg.NodeTimeout = time.Hour
	t.Cleanup(e.timers.close)
	recycled := make(chan *Request, 4)
	onRecycle = func(r *Request) { recycled <- r }
	t.Cleanup(func() { onRecycle = nil })
	w := NewWaiter()
	r := e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now())
	e.Submit(w, r)
	for i := 0; i < n; i++ {
		answer(fps, i, resp.ReplyOK, nil)
	}
	return r, fps, recycled
}

// TestDeadlineCancelAcrossCompaction: cancelled entries are skipped, and
// entries cancelled after the FIFO was compacted or emptied are found by
// their sequence number (or found gone), never another request's.
func TestDeadlineCancelAcrossCompaction(t *testing.T) {
	d := &deadlines{armed: never}
	const n = 5000
	reqs := make([]*Request, n)
	for i := range reqs {
		reqs[i] = &Request{}
		reqs[i].refs.Store(1)
		d.push(reqs[i], int64(i+1))
	}
	// Cancel every third.
	for i := 0; i < n; i += 3 {
		if !d.cancel(reqs[i]) {
			t.Fatalf("entry %d not cancelled", i)
		}
		if d.cancel(reqs[i]) {
			t.Fatalf("entry %d cancelled twice", i)
		}
	}
	// Pop the first 3000: the FIFO compacts (head past half, over 1024).
	due, _ := d.popDue(3000, nil)
	for _, e := range due {
		if e.r == nil {
			t.Fatal("a cancelled entry was returned")
		}
	}
	if want := 3000 - 1000; len(due) != want {
		t.Fatalf("popped %d live entries, want %d", len(due), want)
	}
	// Entries already popped are not found; later ones are, by sequence.
	if d.cancel(reqs[1]) {
		t.Fatal("a popped entry was cancelled")
	}
	for i := 3001; i < n; i++ {
		if i%3 == 0 {
			continue
		}
		if !d.cancel(reqs[i]) {
			t.Fatalf("entry %d not found after compaction", i)
		}
	}
	if due, _ = d.popDue(n+1, nil); len(due) != 0 {
		t.Fatalf("%d entries left after all were popped or cancelled", len(due))
	}
	// Emptied: new entries get new sequence numbers.
	r := &Request{}
	r.refs.Store(1)
	d.push(r, n+10)
	if !d.cancel(r) {
		t.Fatal("entry pushed after the FIFO emptied not cancelled")
	}
	if due, _ := d.popDue(n+20, nil); len(due) != 0 {
		t.Fatalf("%d entries left", len(due))
	}
}
