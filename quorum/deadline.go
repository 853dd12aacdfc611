package quorum

import (
	"container/heap"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/evloop"
)

// The engine's deadlines. Every dispatched request is decided by its
// deadline (node_timeout, bounded by the validity left) whatever its client
// connection is doing: the engine keeps the deadlines itself and decides the
// overdue requests with the votes that arrived. That holds for requests no
// connection waits on directly (a key queue's next request, a split vote's
// retry).
//
// With an event loop, the deadlines fire on the loop, after the replies
// read in the same iteration: a reply that arrived in time is counted even
// when the loop was busy, as the masters' connections are read on the same
// thread. Without one, a goroutine sleeps until the next deadline.
//
// Almost every deadline is its dispatch time plus node_timeout, so they
// arrive in order: a FIFO holds them, and the timer waits for its head. The
// others (shorter: bounded by a small validity left) go into a heap.
// Each entry holds a reference to its request (a pooled request is not
// recycled under it). A decided request needs its deadline no more (expire
// does nothing for it): its FIFO entry is cleared when a reply decides it
// (cancel), so the request is recycled as soon as its submitter and its
// masters are done with it, while still in the CPU's cache, instead of
// node_timeout later when its firing would touch it once more for nothing.
// Cleared entries are skipped when their time comes.
type deadlines struct {
	mu    sync.Mutex // protects the fields below
	fifo  []timed    // fifo[head:] in deadline order
	head  int
	seq0  int64 // the sequence number of fifo[0]: entry s is fifo[s-seq0]
	heap  timedHeap
	armed int64 // the deadline the timer is set for; never: none

	loop  *evloop.Loop  // nil: the goroutine below
	alarm *evloop.Alarm // the loop's timer; loop only
	due   []timed       // Fire's, kept between firings; loop only

	wake     chan struct{} // cap 1: an earlier deadline than armed was pushed
	quit     chan struct{}
	done     chan struct{}
	quitOnce sync.Once
}

type timed struct {
	at int64 // batching.Now() deadline
	r  *Request
}

const never = int64(1<<63 - 1)

// newDeadlines starts the timer on loop, or on its own goroutine when loop
// is nil.
func newDeadlines(loop *evloop.Loop) (*deadlines, error) {
	d := &deadlines{armed: never, loop: loop, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if loop == nil {
		go d.run()
		return d, nil
	}
	close(d.done)
	ready := make(chan struct{})
	if err := loop.Post(func() { d.alarm = loop.NewAlarm(d); close(ready) }); err != nil {
		return nil, err
	}
	<-ready
	return d, nil
}

// push registers r's deadline at; r is decided then if it is not yet.
func (d *deadlines) push(r *Request, at int64) {
	r.ref() // dropped when the entry is popped or cancelled
	d.mu.Lock()
	if n := len(d.fifo); n == d.head || at >= d.fifo[n-1].at {
		r.dlSeq = d.seq0 + int64(n) + 1
		d.fifo = append(d.fifo, timed{at, r})
	} else {
		r.dlSeq = 0 // the heap's entries stay until their time
		heap.Push(&d.heap, timed{at, r})
	}
	earlier := at < d.armed
	if earlier {
		d.armed = at
	}
	d.mu.Unlock()
	if !earlier {
		return
	}
	if d.loop != nil {
		d.loop.Post(func() { d.alarm.At(at) }) // fails only once the loop is closed
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// cancel clears r's FIFO entry, if it is still there, and reports whether
// it did: the caller then drops the entry's reference to r. r must be
// decided.
func (d *deadlines) cancel(r *Request) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.dlSeq == 0 {
		return false
	}
	i := r.dlSeq - 1 - d.seq0
	r.dlSeq = 0
	if i < int64(d.head) || i >= int64(len(d.fifo)) || d.fifo[i].r != r {
		return false // already popped
	}
	d.fifo[i].r = nil
	return true
}

// Fire decides the requests due at now (evloop.Timer) and returns when to
// fire next.
func (d *deadlines) Fire(now int64) int64 {
	due, next := d.popDue(now, d.due[:0])
	d.expire(due) // clears the entries: no request is kept
	if d.due = due[:0]; cap(due) > 4096 {
		d.due = nil // a burst's, not kept
	}
	return next
}

func (d *deadlines) expire(due []timed) {
	for i, e := range due {
		if e.r == nil {
			continue // cancelled
		}
		e.r.expire()
		e.r.unref()
		due[i] = timed{}
	}
}

// popDue moves the entries due at now into out, and returns them with the
// next deadline (never: none), which it arms.
func (d *deadlines) popDue(now int64, out []timed) ([]timed, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.head < len(d.fifo) && d.fifo[d.head].at <= now {
		if d.fifo[d.head].r != nil {
			out = append(out, d.fifo[d.head])
		}
		d.fifo[d.head] = timed{}
		d.head++
	}
	if d.head == len(d.fifo) {
		d.seq0 += int64(d.head)
		d.fifo, d.head = d.fifo[:0], 0
	} else if d.head > len(d.fifo)/2 && d.head > 1024 {
		n := copy(d.fifo, d.fifo[d.head:])
		clear(d.fifo[n:])
		d.seq0 += int64(d.head)
		d.fifo, d.head = d.fifo[:n], 0
	}
	for len(d.heap) > 0 && d.heap[0].at <= now {
		out = append(out, heap.Pop(&d.heap).(timed))
	}
	next := never
	if d.head < len(d.fifo) {
		next = d.fifo[d.head].at
	}
	if len(d.heap) > 0 {
		next = min(next, d.heap[0].at)
	}
	d.armed = next
	return out, next
}

func (d *deadlines) run() {
	defer close(d.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	var due []timed
	for {
		var next int64
		due, next = d.popDue(batching.Now(), due[:0])
		d.expire(due)
		var timer <-chan time.Time
		if next != never {
			t.Reset(time.Duration(next - batching.Now()))
			timer = t.C
		}
		select {
		case <-d.quit:
			t.Stop()
			d.drop()
			return
		case <-d.wake:
			t.Stop()
		case <-timer:
		}
	}
}

// drop releases the entries left at close.
func (d *deadlines) drop() {
	d.mu.Lock()
	left := append(d.fifo[d.head:], d.heap...)
	d.fifo, d.heap, d.head = nil, nil, 0
	d.mu.Unlock()
	for _, e := range left {
		if e.r != nil {
			e.r.unref()
		}
	}
}

// close stops the timer, after the loop (if any) has stopped.
func (d *deadlines) close() {
	d.quitOnce.Do(func() { close(d.quit) })
	<-d.done
	if d.loop != nil {
		d.drop()
	}
}

// timedHeap orders entries by deadline (container/heap).
type timedHeap []timed

func (h timedHeap) Len() int           { return len(h) }
func (h timedHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timedHeap) Push(x any)        { *h = append(*h, x.(timed)) }
func (h *timedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timed{}
	*h = old[:len(old)-1]
	return e
}

// settle drops r's deadline, r being decided: expire does nothing for a
// decided request (late replies are taken as they come, and the ops still
// outstanding hold their own references), so r can be recycled as soon as
// its submitter and its masters are done with it. r.mu is not held; the
// caller holds a reference to r.
func (r *Request) settle() {
	if r.e.timers.cancel(r) {
		r.unref()
	}
}
