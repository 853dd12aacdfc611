package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// TestPushesFirstFramedInPlace: messages taken while a pipeline runs,
// before an UNSUBSCRIBE's confirmation and before a RESET's reply, go out
// in their places among the pipeline's replies (renderPushes slots),
// framed as the protocol was when they were taken: RESP3 pushes before
// the RESET, RESP2 arrays after it; large payloads spliced, counted once
// until written, then given back.
func TestPushesFirstFramedInPlace(t *testing.T) {
	big := []byte(strings.Repeat("L", 2*spliceMin))
	first := []pubsub.Message{{Channel: "c", Payload: big}, {Kind: pubsub.Pattern, Pattern: "c*", Channel: "c", Payload: []byte("rel")}}
	later := []pubsub.Message{{Kind: pubsub.Shard, Channel: "s", Payload: big}}
	last := []pubsub.Message{{Channel: "c", Payload: big}}

	f := &front{s: &Server{}}
	lc := &clientConn{f: f, c: &client{resp3: true}}
	lc.c.conn = lc
	deliver := func(msgs []pubsub.Message) {
		lc.push.msgs = append(lc.push.msgs, msgs...)
	}
	var want []byte
	frame := func(msgs []pubsub.Message, resp3 bool) {
		for i := range msgs {
			want = appendMessageHead(want, &msgs[i], resp3)
			want = append(want, msgs[i].Payload...)
			want = append(want, "\r\n"...)
		}
	}

	// UNSUBSCRIBE c, in RESP3: what was delivered before it goes first.
	deliver(first)
	lc.c.pushesFirst()
	lc.c.local(func(b []byte) []byte { return resp.AppendStatus(b, "unsubscribed") })
	frame(first, true)
	want = append(want, "+unsubscribed\r\n"...)
	// RESET: delivered before it, framed as RESP3; it switches to RESP2.
	deliver(later)
	lc.c.pushesFirst()
	lc.c.resp3 = false
	lc.c.status("RESET")
	frame(later, true)
	want = append(want, "+RESET\r\n"...)
	// Delivered while the pipeline waited, after its last command: after
	// its replies, framed as RESP2.
	deliver(last)
	lc.collectPushes()
	frame(last, false)

	if lc.reserved != len(first)+len(later) {
		t.Fatalf("%d messages reserved for the pipeline's replies, want %d", lc.reserved, len(first)+len(later))
	}
	lc.entered = true
	lc.f.s.active = 1
	lc.finish()
	if lc.reserved != 0 || len(lc.pushed) != 0 {
		t.Fatalf("after finish: %d reserved, %d taken messages left", lc.reserved, len(lc.pushed))
	}
	if f.shared.bytes != int64(len(big)) {
		t.Fatalf("%d bytes of shared payloads counted, want the one large payload's %d", f.shared.bytes, len(big))
	}
	var got []byte
	for lc.outOff < len(lc.out) {
		segs := lc.segments()
		n := 0
		for _, s := range segs {
			k := min(len(s), 1000-n) // a socket that takes 1000 bytes at a time
			got = append(got, s[:k]...)
			n += k
		}
		lc.wrote(n, false)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the pipeline's output: %d bytes, want %d; first difference at %d:\n got %q\nwant %q",
			len(got), len(want), firstDiff(got, want), clipAt(got, firstDiff(got, want)), clipAt(want, firstDiff(got, want)))
	}
	if f.shared.bytes != 0 || len(f.shared.refs) != 0 {
		t.Fatalf("all written, yet %d bytes of shared payloads are counted", f.shared.bytes)
	}
}

// clipAt is b around i, for a failure's message.
func clipAt(b []byte, i int) []byte {
	return b[max(0, i-20):min(len(b), i+40)]
}
