package quorum

import (
	"reflect"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestNoReplyKeptExactly: whatever no reply an operation sets, noReply
// gives it back field for field; only one that is none of the common
// replies (and not the zero Reply) goes to r.cold.
func TestNoReplyKeptExactly(t *testing.T) {
	for _, tc := range []struct {
		rep  resp.Reply
		cold bool
	}{
		{resp.ReplyNil, false},
		{resp.ReplyOK, false},
		{resp.Reply{Type: resp.Integer}, false},
		{resp.Reply{Type: resp.Integer, Int: 1}, false},
		{resp.Reply{}, false}, // none set
		{resp.Reply{Type: resp.Integer, Int: -1}, true},
		{resp.Reply{Type: resp.Bulk, Str: []byte("0")}, true},
		{resp.Reply{Type: resp.Array, Elems: []resp.Reply{resp.ReplyNil, {Type: resp.Integer, Int: 5}}}, true},
		{resp.Reply{Type: resp.Nil, Elems: []resp.Reply{}}, true}, // not as the parser gives it: kept whole
	} {
		r := &Request{}
		r.setNoReply(tc.rep)
		if got := r.noReply(); !reflect.DeepEqual(got, tc.rep) {
			t.Errorf("set %#v, got back %#v", tc.rep, got)
		}
		if (r.cold != nil) != tc.cold {
			t.Errorf("%#v: r.cold allocated %v, want %v", tc.rep, r.cold != nil, tc.cold)
		}
	}
}

// TestCommonRequestsLeaveColdAlone: a SET NX granted, one refused while
// masters are still to answer (its late-undo record), and the release
// script, granted or refused, never write r.cold: what keeps them to the
// Request's own lines.
func TestCommonRequestsLeaveColdAlone(t *testing.T) {
	e, fps := pipedEngine(5, time.Millisecond)
	last := func(i int) batching.Op {
		ops := fps[i].sent()
		return ops[len(ops)-1]
	}
	run := func(r *Request, reps ...resp.Reply) *Waiter {
		t.Helper()
		w := NewWaiter()
		e.Submit(w, r)
		for i, rep := range reps {
			last(i).C.Complete(i, rep, nil)
			if i == 2 && !r.Decided() {
				t.Fatalf("%s: not decided by 3 equal replies", r.cmd)
			}
		}
		// Written, not allocated: a pooled Request may come back from the
		// pool with the (cleared) r.cold an earlier command allocated.
		if r.coldDirty {
			t.Errorf("%s: r.cold written: %+v", r.cmd, *r.cold)
		}
		return w
	}
	now := batching.Now()
	ok, nilRep := resp.ReplyOK, resp.ReplyNil
	a := e.Acquire([]byte("k"), []byte("tokA"), 10*time.Second, now)
	run(a, ok, ok, ok, ok, ok)
	if a.Outcome() != Granted {
		t.Fatalf("SET NX on a free key: %v %v", a.reply, a.err)
	}
	b := e.Acquire([]byte("k"), []byte("tokB"), 10*time.Second, now)
	run(b, nilRep, nilRep, nilRep, nilRep, nilRep)
	if b.reply.Type != resp.Nil || b.err != nil {
		t.Fatalf("SET NX on a held key: %v %v", b.reply, b.err)
	}
	release := &ScriptOp{SHA1: "0123456789012345678901234567890123456789", Preloaded: true,
		Kind: Release, Yes: YesOne, No: resp.Reply{Type: resp.Integer}, Token: Arg{Index: 1}, LockKeys: []int{1}}
	one, zero := resp.Reply{Type: resp.Integer, Int: 1}, resp.Reply{Type: resp.Integer}
	for _, rep := range []resp.Reply{one, zero} {
		r := e.Script(release, [][]byte{[]byte("k")}, [][]byte{[]byte("tokA")}, 0, now)
		run(r, rep, rep, rep, rep, rep)
		if !r.reply.Equal(rep) || r.err != nil {
			t.Fatalf("release, every master answering %v: %v %v", rep, r.reply, r.err)
		}
	}
}

// TestRecycledRequestForgetsCold: a pooled Request keeps its r.cold for
// the next command, cleared.
func TestRecycledRequestForgetsCold(t *testing.T) {
	var seen *Request
	onRecycle = func(r *Request) { seen = r }
	defer func() { onRecycle = nil }()
	r := NewRequest()
	r.setNoReply(resp.Reply{Type: resp.Integer, Int: -1})
	c := r.coldOf()
	c.keys, c.fence, c.fenceAt, c.skip, c.bigSkip = [][]byte{[]byte("a"), []byte("b")}, []byte("f"), 2, 3, 4
	r.refs.Store(1)
	r.unref()
	if seen != r {
		t.Fatal("the request was not recycled")
	}
	if r.cold != c {
		t.Error("the recycled request dropped its cold part")
	}
	if !reflect.DeepEqual(*c, reqCold{}) || r.coldDirty {
		t.Errorf("the recycled request still holds its last command's: %+v", *c)
	}
	if got := r.noReply(); !reflect.DeepEqual(got, resp.Reply{}) {
		t.Errorf("after recycling: no reply %#v", got)
	}
}
