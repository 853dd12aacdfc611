package quorum_test

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestPooledRequestOutlivesItsSubmitter: a pooled request decided by 2 of
// 3 masters is released by its submitter while the third master (paused)
// still owes it a reply. It must not be recycled until that reply arrives,
// or the late reply would count as a vote in someone else's request.
func TestPooledRequestOutlivesItsSubmitter(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	e := startEngine(t, masters, bootstrap)
	poll(t, "every master voting", func() bool { return allVoting(e) })

	recycled := make(chan *quorum.Request, 16)
	quorum.SetRecycleHook(func(r *quorum.Request) { recycled <- r })
	t.Cleanup(func() { quorum.SetRecycleHook(nil) })

	acquire := func(key string) *quorum.Request {
		return e.Acquire([]byte(key), []byte("tok"), 10*time.Second, batching.Now())
	}

	wait := func(w *quorum.Waiter) {
		t.Helper()
		done := make(chan struct{})
		go func() { e.Wait(w); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the request was never decided")
		}
	}

	// All masters answer: the request is recycled once released, not before.
	w := quorum.NewWaiter()
	r := acquire("pool:a")
	e.Submit(w, r)
	wait(w)
	if rep, err := r.Result(); err != nil || !rep.IsOK() {
		t.Fatalf("acquire with every master up: %v %v", rep, err)
	}
	select {
	case <-recycled:
		t.Fatal("a request was recycled before its submitter released it")
	case <-time.After(100 * time.Millisecond): // its masters' replies are in by now
	}
	r.Release()
	select {
	case got := <-recycled:
		if got != r {
			t.Fatalf("recycled %p, want %p", got, r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a released request whose masters all answered was not recycled")
	}

	// Master 2 paused: decided by the other two, released, and kept until
	// master 2 answers.
	if err := masters[2].Pause(); err != nil {
		t.Fatal(err)
	}
	r = acquire("pool:b")
	e.Submit(w, r)
	wait(w)
	if rep, err := r.Result(); err != nil || !rep.IsOK() {
		t.Fatalf("acquire with 2 of 3 masters: %v %v", rep, err)
	}
	r.Release()
	select {
	case <-recycled:
		t.Fatal("a request was recycled while a paused master still owed it a reply")
	case <-time.After(300 * time.Millisecond):
	}
	if err := masters[2].Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-recycled:
		if got != r {
			t.Fatalf("recycled %p, want %p", got, r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request was not recycled after the paused master answered")
	}
	if v, err := masters[2].Do("GET", "pool:b"); err != nil || v != "tok" {
		t.Fatalf("the paused master's late SET: %q %v", v, err)
	}
}
