package proxy

import (
	"testing"

	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// TestSharedPushesFreed: what closing a subscriber frees is the payloads
// no other subscriber holds, a payload it holds twice (a channel and a
// pattern matching it) included, and a broadcast's only once the last of
// its subscribers holds it.
func TestSharedPushesFreed(t *testing.T) {
	var s sharedPushes
	own, both, fan := []byte("own-payload"), []byte("by channel and pattern"), []byte("broadcast")
	a := []pubsub.Message{{Payload: own}, {Payload: both}, {Kind: pubsub.Pattern, Payload: both}, {Payload: fan}}
	b := []pubsub.Message{{Payload: fan}}
	for _, msgs := range [][]pubsub.Message{a, b} {
		for i := range msgs {
			s.hold(msgs[i].Payload)
		}
	}
	if want := int64(len(own) + len(both) + len(fan)); s.bytes != want {
		t.Fatalf("held %d bytes, want %d (each payload once)", s.bytes, want)
	}
	if got, want := s.freed(payloads(a)), int64(len(own)+len(both)); got != want {
		t.Errorf("closing a frees %d, want %d: its own payloads, not the broadcast b holds too", got, want)
	}
	if got := s.freed(payloads(b)); got != 0 {
		t.Errorf("closing b frees %d, want 0: a holds the broadcast too", got)
	}
	for i := range a {
		s.drop(a[i].Payload)
	}
	if got, want := s.freed(payloads(b)), int64(len(fan)); got != want || s.bytes != want {
		t.Errorf("with a gone, closing b frees %d and %d bytes are held, want %d", got, s.bytes, want)
	}
}

// payloads gives freed the payloads of msgs.
func payloads(msgs []pubsub.Message) func(func([]byte)) {
	return func(f func([]byte)) {
		for i := range msgs {
			f(msgs[i].Payload)
		}
	}
}
