package pubsub

import (
	"net"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Subscriptions whose confirmations are in flight. These tests drive the
// hub's reader entry point (onPush) directly, in an order the masters'
// streams can legally interleave, so they are deterministic.

func arr(elems ...string) resp.Reply {
	r := resp.Reply{Type: resp.Array}
	for _, e := range elems {
		r.Elems = append(r.Elems, resp.Reply{Type: resp.Bulk, Str: []byte(e)})
	}
	return r
}

// hubOnDeadMasters is a hub whose masters never answer (nothing listens
// on port 1): the test plays the masters' streams itself. Each master's
// connection counts as up (a pipe nobody reads: what the hub sends is
// buffered, never written).
func hubOnDeadMasters(t *testing.T, n int) *Hub {
	cfg := Config{Logger: testConfig(t, nil).Logger, RetryMin: time.Hour, RetryMax: time.Hour,
		PingInterval: time.Second, ReadTimeout: 2 * time.Second}
	for i := 0; i < n; i++ {
		cfg.Masters = append(cfg.Masters, "127.0.0.1:1")
	}
	h := startHub(t, cfg)
	h.mu.Lock()
	for _, m := range h.masters {
		c, peer := net.Pipe()
		t.Cleanup(func() { c.Close(); peer.Close() })
		m.conn = c
	}
	h.mu.Unlock()
	return h
}

// TestLateConfirmationNoDuplicate: a subscription confirmed on two of
// three masters (enough for the proxy's SUBSCRIBE to answer). Master 2
// processed the SUBSCRIBE before the PUBLISH, so its stream is "subscribe
// ch" then "message ch 0", read after masters 0 and 1's copies: its copy
// is the same message, not a second one.
func TestLateConfirmationNoDuplicate(t *testing.T) {
	h := hubOnDeadMasters(t, 3)
	rec := &recorder{}
	if _, err := h.Subscribe(rec, Channel, "ch"); err != nil {
		t.Fatal(err)
	}
	h.onPush(0, arr("subscribe", "ch", "1"), false)
	h.onPush(1, arr("subscribe", "ch", "1"), false)
	// one PUBLISH ch 0, sent to every master by a proxy's Broadcast
	h.onPush(0, arr("message", "ch", "0"), false)
	h.onPush(1, arr("message", "ch", "0"), false)
	h.onPush(2, arr("subscribe", "ch", "1"), false) // master 2's stream, read late
	h.onPush(2, arr("message", "ch", "0"), false)
	if got := rec.payloads(); len(got) != 1 {
		t.Fatalf("one PUBLISH delivered %d times: %q", len(got), got)
	}
}

// TestReceiversWhileConfirmationsInFlight: a master counts the hub's
// subscription from the moment it processed the SUBSCRIBE, before the hub
// read the confirmation, and until it processed the UNSUBSCRIBE. Right
// after a SUBSCRIBE answered (a quorum confirmed), PUBLISH must not count
// the one local subscriber twice; right after the last local subscriber
// left, it must not answer 1 for nobody.
func TestReceiversWhileConfirmationsInFlight(t *testing.T) {
	h := hubOnDeadMasters(t, 3)
	rec := &recorder{}
	if _, err := h.Subscribe(rec, Channel, "ch"); err != nil {
		t.Fatal(err)
	}
	h.onPush(0, arr("subscribe", "ch", "1"), false)
	h.onPush(1, arr("subscribe", "ch", "1"), false)
	// master 2 processed the SUBSCRIBE, its confirmation is not read yet
	if n := h.Receivers(Channel, "ch", []int64{1, 1, 1}, Owned{}); n != 1 {
		t.Errorf("one subscriber, every master counting the hub once: Receivers %d, want 1", n)
	}
	h.onPush(2, arr("subscribe", "ch", "1"), false)
	h.Unsubscribe(rec, Channel, "ch")
	// master 0 has not processed the hub's UNSUBSCRIBE yet
	if n := h.Receivers(Channel, "ch", []int64{1, 0, 0}, Owned{}); n != 0 {
		t.Errorf("no subscriber left anywhere: Receivers %d, want 0", n)
	}
}

// TestReceiversAfterLateUnsubscribeConfirmation: the last local
// subscriber left, and a PUBLISH is sent. Every master ran it before the
// hub's UNSUBSCRIBE, so each answers 1 (the hub), but the hub reads the
// masters' UNSUBSCRIBE confirmations before the PUBLISH's replies: the
// hub's part is 1 where the PUBLISH was sent, 0 where its replies are
// read. Nobody receives the message: 0, as on one Redis (hiredis's release
// wait, compat/c/hiredis_lock.c, saw 1).
func TestReceiversAfterLateUnsubscribeConfirmation(t *testing.T) {
	h := hubOnDeadMasters(t, 3)
	rec := &recorder{}
	if _, err := h.Subscribe(rec, Channel, "ch"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.onPush(i, arr("subscribe", "ch", "1"), false)
	}
	h.Unsubscribe(rec, Channel, "ch")
	sent := h.Own(Channel, "ch")
	for i := 0; i < 3; i++ {
		h.onPush(i, arr("unsubscribe", "ch", "0"), false)
	}
	if n := h.Receivers(Channel, "ch", []int64{1, 1, 1}, sent); n != 0 {
		t.Errorf("no subscriber left anywhere, the masters counted the hub when they ran the PUBLISH: Receivers %d, want 0", n)
	}
	// A subscriber arriving after the PUBLISH was sent counts as the hub
	// on a master that ran it after the hub's SUBSCRIBE: once, not twice.
	if _, err := h.Subscribe(rec, Channel, "ch"); err != nil {
		t.Fatal(err)
	}
	if n := h.Receivers(Channel, "ch", []int64{1, 1, 1}, sent); n != 1 {
		t.Errorf("one subscriber, subscribed after the PUBLISH was sent: Receivers %d, want 1", n)
	}
}

// The table of dropped subscriptions empties as masters confirm, and
// when a master's connection ends.
func TestLeavingForgotten(t *testing.T) {
	h := hubOnDeadMasters(t, 3)
	rec := &recorder{}
	for _, ch := range []string{"a", "b"} {
		if _, err := h.Subscribe(rec, Channel, ch); err != nil {
			t.Fatal(err)
		}
		h.Unsubscribe(rec, Channel, ch)
	}
	h.onPush(0, arr("unsubscribe", "a", "0"), false)
	h.onPush(1, arr("unsubscribe", "a", "0"), false)
	h.onPush(2, arr("unsubscribe", "a", "0"), false)
	h.onPush(0, arr("unsubscribe", "b", "0"), false)
	h.mu.Lock()
	h.masterDown(1)
	h.masterDown(2)
	n := len(h.leaving)
	h.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d dropped subscriptions still remembered after every master confirmed or went down", n)
	}
}
