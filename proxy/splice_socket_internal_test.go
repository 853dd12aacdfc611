//go:build linux

package proxy

import (
	"bytes"
	"math/rand"
	"strings"
	"syscall"
	"testing"

	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// TestSplicedOutputOverASocket: subscribers' outputs of many messages,
// large and small, of every kind (message, pmessage, smessage), in RESP2
// and RESP3, with replies between them, go out through a real socket
// that takes a few KiB at a time (fdTransport.write: writev of at most
// evloop.WritevMax pieces, cut anywhere by a full socket), more messages
// framed while a payload is half written (as shutdown frames the held
// ones): each subscriber reads exactly what a copy of every message would
// have written, and once all is written or a subscriber is closed, no
// shared payload stays counted.
func TestSplicedOutputOverASocket(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	// Shared payloads, as the hub hands the same slice to every
	// subscriber: some under spliceMin (copied), most spliced.
	var payloads [][]byte
	for i := 0; i < 12; i++ {
		n := []int{0, 5, spliceMin - 1, spliceMin, spliceMin + 1, 3*spliceMin + 7, 200 << 10}[i%7]
		payloads = append(payloads, bytes.Repeat([]byte{byte('a' + i)}, n))
	}
	kinds := []pubsub.Kind{pubsub.Channel, pubsub.Pattern, pubsub.Shard}
	batch := func() []pubsub.Message {
		var msgs []pubsub.Message
		for i := 0; i < 40; i++ {
			msgs = append(msgs, pubsub.Message{Kind: kinds[rng.Intn(3)], Pattern: "lock:*", Channel: "lock:" + strings.Repeat("x", rng.Intn(9)),
				Payload: payloads[rng.Intn(len(payloads))]})
		}
		return msgs
	}

	f := &front{}
	type sub struct {
		lc   *clientConn
		w, r int
		want []byte
		got  []byte
	}
	var subs []*sub
	for i := 0; i < 3; i++ {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
		if err := syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096); err != nil {
			t.Fatal(err)
		}
		lc := &clientConn{f: f, c: &client{resp3: i == 1}, t: &fdTransport{fd: fds[0]}}
		subs = append(subs, &sub{lc: lc, w: fds[0], r: fds[1]})
	}
	// give frames msgs into s's output between two replies, and what a
	// copy of each would have written into s.want.
	give := func(s *sub, msgs []pubsub.Message) {
		s.lc.out = append(s.lc.out, "+OK\r\n"...)
		s.want = append(s.want, "+OK\r\n"...)
		for i := range msgs {
			s.lc.pushed = append(s.lc.pushed, msgs[i])
			f.shared.hold(msgs[i].Payload)
			s.want = appendMessageHead(s.want, &msgs[i], s.lc.c.resp3)
			s.want = append(s.want, msgs[i].Payload...)
			s.want = append(s.want, "\r\n"...)
		}
		s.lc.framePushes()
		s.lc.out = append(s.lc.out, ":1\r\n"...)
		s.want = append(s.want, ":1\r\n"...)
	}
	// step writes what the socket takes, as flush does, and reads a
	// little at the other end.
	rd := make([]byte, 3000)
	step := func(s *sub) {
		if s.lc.outOff < len(s.lc.out) {
			n, err := s.lc.t.write(s.lc.segments())
			if err != nil && err != syscall.EAGAIN {
				t.Fatal(err)
			}
			s.lc.wrote(n, s.lc.t.inFlight())
			clear(s.lc.segs)
		}
		if r, err := syscall.Read(s.r, rd[:1+rng.Intn(len(rd)-1)]); err == nil {
			s.got = append(s.got, rd[:r]...)
		}
	}
	first := batch()
	for _, s := range subs {
		give(s, first)
	}
	second := batch()
	for round := 0; ; round++ {
		busy := false
		for _, s := range subs {
			if s.lc.outOff < len(s.lc.out) || len(s.got) < len(s.want) {
				busy = true
				step(s)
			}
			if round == 40 {
				// More framed behind output not all written, a payload
				// perhaps half out.
				give(s, second)
			}
		}
		if !busy && round > 40 {
			break
		}
		if round > 1<<20 {
			t.Fatal("the outputs never went out")
		}
	}
	for i, s := range subs {
		if !bytes.Equal(s.got, s.want) {
			t.Fatalf("subscriber %d (resp3 %v) read %d bytes, want %d; first difference at %d", i, s.lc.c.resp3, len(s.got), len(s.want), firstDiff(s.got, s.want))
		}
		if s.lc.unwritten() != 0 || len(s.lc.splices) != 0 {
			t.Fatalf("subscriber %d wrote all, yet %d bytes, %d splices unwritten", i, s.lc.unwritten(), len(s.lc.splices))
		}
	}
	if f.shared.bytes != 0 || len(f.shared.refs) != 0 {
		t.Fatalf("every output written, yet %d bytes of %d payloads stay counted", f.shared.bytes, len(f.shared.refs))
	}

	// Closed with a payload half written, others not yet written: given
	// back all the same.
	s := subs[0]
	give(s, first)
	for len(s.lc.splices) > 0 && s.lc.spliceOff == 0 {
		step(s)
	}
	if f.shared.bytes == 0 {
		t.Fatal("nothing counted while a subscriber holds spliced payloads")
	}
	s.lc.closed = true
	s.lc.dropPushed()
	s.lc.dropSplices()
	if f.shared.bytes != 0 || len(f.shared.refs) != 0 {
		t.Fatalf("closed mid-payload, yet %d bytes of %d payloads stay counted", f.shared.bytes, len(f.shared.refs))
	}
}
