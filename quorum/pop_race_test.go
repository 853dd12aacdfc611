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
// header whose length and pointer come from different writes).
func TestPoppedTTLWithALateReply(t *testing.T) {
	e := fakeEngine(3)
	popped := func(ttl int64) resp.Reply {
		return resp.Reply{Type: resp.Array, Elems: []resp.Reply{
			{Type: resp.Bulk, Str: []byte("a")}, {Type: resp.Bulk, Str: []byte("e1")}, {Type: resp.Integer, Int: ttl}}}
	}
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
		<-done
	}
}
