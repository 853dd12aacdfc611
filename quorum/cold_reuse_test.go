package quorum

import (
	"bytes"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestPooledColdClearedOnEveryPath: a pooled script acquisition that sets
// every field of r.cold the engine writes — an uncommon no reply, a script
// to load, several keys, members to undo, a fence, large-command and
// matching-work accounting — loses a split vote with a master still to
// answer (its record on the multi slot, with its keys' hashes). Its retry
// (pooled too) gets its parent and skip, supersedes it there (sups) and is
// admitted as a large command again. Once every master has answered:
// each recycled Request had r.cold marked written whenever anything was
// in it, and leaves it cleared for the next command; the multi slot and
// its hashes are empty; the large-command and matching-work counts are
// back to zero on every master.
func TestPooledColdClearedOnEveryPath(t *testing.T) {
	e, fps := pipedEngine(5, time.Millisecond)
	defer e.timers.close()
	e.big, e.work = make([]atomic.Int64, e.n), make([]atomic.Int64, e.n)
	var mu sync.Mutex
	var recycled []*Request
	onRecycle = func(r *Request) {
		mu.Lock()
		defer mu.Unlock()
		recycled = append(recycled, r)
		if r.cold != nil && !r.coldDirty && !reflect.ValueOf(*r.cold).IsZero() {
			t.Errorf("recycled with r.cold written but not marked so: %+v", *r.cold)
		}
	}
	defer func() { onRecycle = nil }()

	op := &ScriptOp{SHA1: "0123456789012345678901234567890123456789", Kind: Acquire,
		Yes: YesOne, No: resp.Reply{Type: resp.Integer, Int: -1}, Token: Arg{Index: 1},
		EachKey: true, Undo: UndoZRem, UndoExtra: []string{"member"},
		Counter: Arg{Keys: true, Index: 3}}
	keys := [][]byte{[]byte("k1"), []byte("k2"), []byte("fence")}
	pad := bytes.Repeat([]byte("x"), 2*batching.SmallCommand)
	r := e.Script(op, keys, [][]byte{[]byte("tok"), pad}, 10*time.Second, batching.Now())
	r.SetMasterWork(2 * smallWork)
	if r.cold == nil || r.cold.load != op || len(r.cold.keys) != 3 || r.cold.fence == nil ||
		len(r.cold.undoExtra) != 1 || r.noRk != rkExt {
		t.Fatalf("the script did not set what this test is about: %+v", r.cold)
	}
	w := NewWaiter()
	e.Submit(w, r)
	if r.cold.bigBytes == 0 || r.cold.work == 0 {
		t.Fatalf("not counted as a large command: %+v", *r.cold)
	}
	last := func(i int) batching.Op {
		ops := fps[i].sent()
		return ops[len(ops)-1]
	}
	one, zero := resp.Reply{Type: resp.Integer, Int: 1}, resp.Reply{Type: resp.Integer}
	first4 := last(4)
	last(0).C.Complete(0, one, nil) // one yes: a split vote, retried
	for i := 1; i < 4; i++ {
		last(i).C.Complete(i, zero, nil)
	}
	// The retry runs after the jitter, on masters 0 to 3 (4 still owes
	// the first attempt's reply).
	deadline := time.Now().Add(5 * time.Second)
	var c *Request
	for c == nil {
		if time.Now().After(deadline) {
			t.Fatal("no retry sent")
		}
		time.Sleep(time.Millisecond)
		if q, ok := last(1).C.(*Request); ok && q != r {
			c = q
		}
	}
	if c.cold == nil || c.cold.parent != r || c.cold.skip != 1<<4 || len(c.cold.sups) != 1 || c.cold.bigBytes == 0 {
		t.Fatalf("the retry did not set what this test is about: %+v", c.cold)
	}
	for i := 0; i < 4; i++ {
		last(i).C.Complete(i, zero, nil)
	}
	e.Wait(w)
	if r.err != nil || r.Outcome() == Granted {
		t.Fatalf("a vote with one yes: %v %v", r.reply, r.err)
	}
	r.Release()
	first4.C.Complete(4, zero, nil) // the first attempt's last reply: nothing written there
	mu.Lock()
	defer mu.Unlock()
	if len(recycled) != 2 {
		t.Fatalf("%d requests recycled, want the attempt and its retry", len(recycled))
	}
	for _, q := range recycled {
		if q.cold == nil || !reflect.ValueOf(*q.cold).IsZero() || q.coldDirty {
			t.Errorf("a recycled Request hands the next command its r.cold: %+v (dirty %v)", q.cold, q.coldDirty)
		}
	}
	e.slots.multi.mu.Lock()
	left, hashes := len(e.slots.multi.waiting), len(e.slots.multiHashes)
	e.slots.multi.mu.Unlock()
	if left != 0 || hashes != 0 || e.slots.nmulti.Load() != 0 {
		t.Errorf("multi slot: %d waiting, %d hashes kept, nmulti %d; want none", left, hashes, e.slots.nmulti.Load())
	}
	for i := range e.big {
		if b, wk := e.big[i].Load(), e.work[i].Load(); b != 0 || wk != 0 {
			t.Errorf("master %d: %d large-command bytes and %d matching work still counted", i, b, wk)
		}
	}
}
