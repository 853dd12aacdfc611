package quorum

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestPoppedTTLWithALateReply: a pop round is decided once a quorum
// answered and one popped; the other masters' replies still arrive and
// are written into r.replies and r.state under r.mu (complete). PoppedTTL,
// which the proxy's loop calls in roundDone for a client that hung up,
// read every master's state and reply without r.mu (review, helper-51): a data race with a
// late reply (go test -race reports it; a torn Reply could carry an Elems
// header whose length and pointer come from different writes). PoppedMore
// reads them too.
func TestPoppedTTLWithALateReply(t *testing.T) {
	e := fakeEngine(3)
	popped := func(ttl int64) resp.Reply { return poppedReply("a", "e1", ttl, 0) }
	for i := 0; i < 200; i++ {
		r := e.Pop([][]byte{[]byte("a"), []byte("b")}, false, 1)
		w := NewWaiter()
		r.e, r.w = e, w
		w.pending.Add(1)
		r.Complete(0, popped(1000), nil)
		r.Complete(1, popped(1000), nil)
		if !r.Decided() {
			t.Fatal("not decided with a quorum that popped")
		}
		done := make(chan struct{})
		go func() {
			r.Complete(2, popped(5000), nil) // the slow master's reply, after the decision
			close(done)
		}()
		_ = r.PoppedTTL() // the loop, in roundDone
		_ = r.PoppedMore()
		<-done
	}
}

// poppedReply is a master's reply to a pop round that popped elem from
// key, with the list's PTTL before and left elements after.
func poppedReply(key, elem string, ttl, left int64) resp.Reply {
	return resp.Reply{Type: resp.Array, Elems: []resp.Reply{
		{Type: resp.Bulk, Str: []byte(key)}, {Type: resp.Bulk, Str: []byte(elem)},
		{Type: resp.Integer, Int: ttl}, {Type: resp.Integer, Int: left}}}
}

// TestPoppedMore: a decided pop round reports more only when a master
// that popped from the answered list still holds some of it; a master
// that popped another list, or that answered nothing, does not count.
func TestPoppedMore(t *testing.T) {
	e := fakeEngine(3)
	for _, c := range []struct {
		name    string
		replies []resp.Reply
		want    bool
	}{
		{"every master emptied the list", []resp.Reply{poppedReply("a", "1", 100, 0), poppedReply("a", "1", 100, 0), poppedReply("a", "1", 100, 0)}, false},
		{"one master holds one more", []resp.Reply{poppedReply("a", "1", 100, 0), poppedReply("a", "1", 100, 1), poppedReply("a", "1", 100, 0)}, true},
		{"a master empty (slow to get the push)", []resp.Reply{{Type: resp.Nil}, poppedReply("a", "1", 100, 0), poppedReply("a", "1", 100, 0)}, false},
		{"more on another list only", []resp.Reply{poppedReply("a", "1", 100, 0), poppedReply("a", "1", 100, 0), poppedReply("b", "1", 100, 3)}, false},
	} {
		r := e.Pop([][]byte{[]byte("a"), []byte("b")}, false, 1)
		w := NewWaiter()
		r.e, r.w = e, w
		w.pending.Add(1)
		for i, rep := range c.replies {
			r.Complete(i, rep, nil)
		}
		if !r.Decided() {
			t.Fatalf("%s: not decided", c.name)
		}
		if rep, err := r.Result(); err != nil || rep.Type != resp.Array || string(rep.Elems[0].Str) != "a" {
			t.Fatalf("%s: decided %v %v, want an element of a", c.name, rep, err)
		}
		if got := r.PoppedMore(); got != c.want {
			t.Errorf("%s: PoppedMore %v, want %v", c.name, got, c.want)
		}
	}
}
