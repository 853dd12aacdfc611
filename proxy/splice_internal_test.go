package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// TestSplicedOutputResumes: a connection's output with large payloads
// spliced in it (between replies and small messages, copied) goes out
// byte for byte in order, however the socket cuts the writes; each payload
// is counted once among the shared payloads while any subscriber has not
// written it, and nothing stays counted once all is written, or once a
// subscriber is closed mid-payload, or once a TLS writer that held the
// payloads is done.
func TestSplicedOutputResumes(t *testing.T) {
	big := []byte(strings.Repeat("B", 3*spliceMin+5))
	other := []byte(strings.Repeat("o", spliceMin))
	small := []byte("unlocked")
	msgs := []pubsub.Message{{Channel: "c", Payload: big}, {Channel: "c", Payload: small}, {Kind: pubsub.Pattern, Pattern: "c*", Channel: "c", Payload: big}, {Channel: "c", Payload: other}}
	var want []byte
	want = append(want, "+OK\r\n"...)
	for i := range msgs {
		want = appendMessageHead(want, &msgs[i], false)
		want = append(want, msgs[i].Payload...)
		want = append(want, "\r\n"...)
	}
	want = append(want, ":1\r\n"...)

	f := &front{}
	// fill gives a subscriber the messages, taken, between two replies.
	fill := func() *clientConn {
		lc := &clientConn{f: f, c: &client{}}
		lc.out = append(lc.out, "+OK\r\n"...)
		for i := range msgs {
			lc.pushed = append(lc.pushed, msgs[i])
			f.shared.hold(msgs[i].Payload)
		}
		lc.framePushes()
		lc.out = append(lc.out, ":1\r\n"...)
		return lc
	}
	a, b := fill(), fill()
	if len(a.splices) != 3 {
		t.Fatalf("%d payloads spliced, want the 3 of at least %d bytes", len(a.splices), spliceMin)
	}
	if held := int64(len(big) + len(other)); f.shared.bytes != held {
		t.Fatalf("two subscribers' output holds %d bytes of shared payloads counted, want %d: each payload once", f.shared.bytes, held)
	}

	// a writes in cuts of many sizes, b one byte past a payload's start,
	// then is closed.
	cuts := []int{1, 3, 17, 4096, spliceMin - 1, 2, 2*spliceMin + 7, 5}
	var got []byte
	for i := 0; a.outOff < len(a.out); i++ {
		step := cuts[i%len(cuts)]
		segs := a.segments()
		var n int
		for _, s := range segs {
			k := min(len(s), step-n)
			got = append(got, s[:k]...)
			if n += k; n == step {
				break
			}
		}
		a.wrote(n, false)
		clear(a.segs)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("written in cuts: %d bytes, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	if a.splicedSize != 0 || len(a.splices) != 0 || a.unwritten() != 0 {
		t.Fatalf("all written, yet %d spliced bytes and %d splices are left", a.splicedSize, len(a.splices))
	}
	if held := int64(len(big) + len(other)); f.shared.bytes != held {
		t.Fatalf("with one subscriber done, %d bytes counted, want %d: the other has not written them", f.shared.bytes, held)
	}
	b.wrote(b.splices[0].at+1, false)
	if b.spliceOff != 1 || b.unwritten() != int64(len(want)-b.splices[0].at-1) {
		t.Fatalf("one byte into the first payload: off %d, unwritten %d", b.spliceOff, b.unwritten())
	}
	b.closed = true
	b.dropSplices()
	if f.shared.bytes != 0 || len(f.shared.refs) != 0 {
		t.Fatalf("both subscribers done or closed, yet %d bytes (%d payloads) are still counted", f.shared.bytes, len(f.shared.refs))
	}

	// A TLS writer takes the whole output: the payloads stay counted
	// until it is done with them.
	c := fill()
	st := &streamTransport{writeNext: make(chan [][]byte, 1)}
	c.t = st
	n, err := st.write(c.segments())
	if err != nil || n != len(want) {
		t.Fatalf("the stream took %d bytes (%v), want %d", n, err, len(want))
	}
	c.wrote(n, st.inFlight())
	if held := int64(len(big) + len(other)); f.shared.bytes != held || len(c.lent) != 3 || st.held() != len(want)-len(big)*2-len(other) {
		t.Fatalf("a writer holding the payloads: %d bytes counted (want %d), %d lent, %d copied (want the frames around them, %d)",
			f.shared.bytes, held, len(c.lent), st.held(), len(want)-len(big)*2-len(other))
	}
	var batch []byte
	for _, s := range <-st.writeNext {
		batch = append(batch, s...)
	}
	if !bytes.Equal(batch, want) {
		t.Fatalf("the writer's batch: %d bytes, want %d; first difference at %d", len(batch), len(want), firstDiff(batch, want))
	}
	c.returnLent()
	if f.shared.bytes == 0 {
		t.Fatal("payloads given back while the writer still holds them")
	}
	st.writing = false // the writer is done
	c.returnLent()
	if f.shared.bytes != 0 || len(c.lent) != 0 {
		t.Fatalf("the writer done, %d bytes still counted", f.shared.bytes)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
