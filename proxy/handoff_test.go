package proxy

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestPoppedForAGoneClientHandedOff: a pop round that popped an element
// for a client whose connection closed meanwhile gives it to another
// client blocked on that list (as Redis would have served it), instead of
// losing a release's signal. Remove the hand-off in roundDone to see the
// waiter left blocked.
func TestPoppedForAGoneClientHandedOff(t *testing.T) {
	s := &Server{}
	f := &front{s: s, blocked: map[string]map[*blocker]struct{}{}}
	block := func(resp3 bool, keys ...string) *blocker {
		c := &client{w: quorum.NewWaiter(), resp3: resp3}
		c.w.Hold()
		lc := &clientConn{f: f, c: c}
		b := &blocker{lc: lc}
		for _, k := range keys {
			b.keys = append(b.keys, []byte(k))
		}
		lc.blk = b
		s.blockedN.Add(1)
		f.block(b)
		return b
	}
	gone := block(false, "sig")
	other := block(false, "elsewhere")
	waiter := block(true, "other-list", "sig")
	popped := resp.Reply{Type: resp.Array, Elems: []resp.Reply{
		{Type: resp.Bulk, Str: []byte("sig")}, {Type: resp.Bulk, Str: []byte("1")}}}
	gone.round = quorum.Decided(quorum.Read, quorum.Done, popped, nil, 0)
	gone.finish(nil) // its connection closed while the round was in flight
	gone.roundDone()
	if !waiter.done || string(waiter.reply) != "*2\r\n$3\r\nsig\r\n$1\r\n1\r\n" {
		t.Fatalf("the other waiter on sig: done %v, reply %q; want the popped element", waiter.done, waiter.reply)
	}
	if other.done {
		t.Fatalf("a waiter on another list was answered: %q", other.reply)
	}
	if n := s.blockedN.Load(); n != 1 {
		t.Fatalf("blocked clients %d, want 1 (the one on another list)", n)
	}
}
