package proxy_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// Two proxies on the same three masters, each with its hub: what a
// subscriber of one hears from the other, framed byte for byte as Redis
// frames it.
func twoProxies(t *testing.T, ks string) (a, b *cluster) {
	t.Helper()
	masters := redisproc.ForTest(t, 3)
	return startHubFront(t, masters, ks), startHubFront(t, masters, ks)
}

// TestSubscribeRESP2: confirmations, messages once per PUBLISH though
// three masters publish, PUBLISH's count, subscribed mode's refusals and
// PING, UNSUBSCRIBE without names, and leaving subscribed mode.
func TestSubscribeRESP2(t *testing.T) {
	a, b := twoProxies(t, "")
	sub, pub := a.respConn(), b.respConn()
	wait := 5 * time.Second

	sub.send("SUBSCRIBE", "ch1", "ch2")
	if got, want := sub.mustFrame(wait), pushFrame(false, "subscribe", "ch1", ":1"); got != want {
		t.Fatalf("first confirmation %q, want %q", got, want)
	}
	if got, want := sub.mustFrame(wait), pushFrame(false, "subscribe", "ch2", ":2"); got != want {
		t.Fatalf("second confirmation %q, want %q", got, want)
	}
	for i := 0; i < 20; i++ {
		pub.send("PUBLISH", "ch1", "0") // Redisson's unlock message, the same every time
		if got := pub.mustFrame(wait); got != ":1\r\n" {
			t.Fatalf("PUBLISH answered %q, want :1 (one subscribed proxy)", got)
		}
	}
	for i := 0; i < 20; i++ {
		if got, want := sub.mustFrame(wait), pushFrame(false, "message", "ch1", "0"); got != want {
			t.Fatalf("message %d: %q, want %q", i, got, want)
		}
	}
	sub.none(300 * time.Millisecond) // no master's copy delivered twice

	sub.send("GET", "x")
	if got, want := sub.mustFrame(wait), "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"; got != want {
		t.Fatalf("GET in subscribed mode: %q, want %q", got, want)
	}
	sub.send("PING")
	if got, want := sub.mustFrame(wait), "*2\r\n$4\r\npong\r\n$0\r\n\r\n"; got != want {
		t.Fatalf("PING in subscribed mode: %q, want %q", got, want)
	}
	sub.send("PING", "hi")
	if got, want := sub.mustFrame(wait), "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"; got != want {
		t.Fatalf("PING hi in subscribed mode: %q, want %q", got, want)
	}

	sub.send("PSUBSCRIBE", "ch*")
	if got, want := sub.mustFrame(wait), pushFrame(false, "psubscribe", "ch*", ":3"); got != want {
		t.Fatalf("psubscribe confirmation %q, want %q", got, want)
	}
	pub.send("PUBLISH", "ch2", "hello")
	if got := pub.mustFrame(wait); got != ":2\r\n" {
		t.Fatalf("PUBLISH to a channel and a pattern answered %q, want :2", got)
	}
	// Redis sends the channel's message before the pattern's.
	if got, want := sub.mustFrame(wait), pushFrame(false, "message", "ch2", "hello"); got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if got, want := sub.mustFrame(wait), pushFrame(false, "pmessage", "ch*", "ch2", "hello"); got != want {
		t.Fatalf("pmessage %q, want %q", got, want)
	}

	sub.send("UNSUBSCRIBE")
	var names []string
	for i := 0; i < 2; i++ {
		f := sub.mustFrame(wait)
		if !strings.HasPrefix(f, "*3\r\n$11\r\nunsubscribe\r\n") {
			t.Fatalf("unsubscribe confirmation %q", f)
		}
		names = append(names, f)
	}
	sort.Strings(names)
	if !strings.Contains(names[0], bulk("ch1")) || !strings.Contains(names[1], bulk("ch2")) ||
		!(strings.HasSuffix(names[0], ":2\r\n") || strings.HasSuffix(names[0], ":1\r\n")) {
		t.Fatalf("unsubscribe confirmations %q", names)
	}
	sub.send("PUNSUBSCRIBE", "ch*")
	if got, want := sub.mustFrame(wait), pushFrame(false, "punsubscribe", "ch*", ":0"); got != want {
		t.Fatalf("punsubscribe %q, want %q", got, want)
	}
	sub.send("UNSUBSCRIBE")
	if got, want := sub.mustFrame(wait), "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"; got != want {
		t.Fatalf("UNSUBSCRIBE with none %q, want %q", got, want)
	}
	sub.send("GET", "x") // out of subscribed mode
	if got := sub.mustFrame(wait); got != "$-1\r\n" {
		t.Fatalf("GET after leaving subscribed mode: %q", got)
	}
	pub.send("PUBLISH", "ch1", "late")
	if got := pub.mustFrame(wait); got != ":0\r\n" {
		t.Fatalf("PUBLISH to nobody answered %q, want :0", got)
	}
}

// TestSubscribeRESP3: confirmations and messages are pushes, and other
// commands work while subscribed.
func TestSubscribeRESP3(t *testing.T) {
	a, b := twoProxies(t, "")
	sub, pub := a.respConn(), b.respConn()
	wait := 5 * time.Second
	sub.send("HELLO", "3")
	if f := sub.mustFrame(wait); !strings.HasPrefix(f, "%7\r\n") {
		t.Fatalf("HELLO 3: %q", f)
	}
	sub.send("SUBSCRIBE", "c")
	if got, want := sub.mustFrame(wait), pushFrame(true, "subscribe", "c", ":1"); got != want {
		t.Fatalf("confirmation %q, want %q", got, want)
	}
	sub.send("GET", "k")
	if got := sub.mustFrame(wait); got != "_\r\n" {
		t.Fatalf("GET while subscribed in RESP3: %q, want _", got)
	}
	sub.send("PING")
	if got := sub.mustFrame(wait); got != "+PONG\r\n" {
		t.Fatalf("PING while subscribed in RESP3: %q", got)
	}
	pub.send("PUBLISH", "c", "m")
	pub.mustFrame(wait)
	if got, want := sub.mustFrame(wait), pushFrame(true, "message", "c", "m"); got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	sub.send("SSUBSCRIBE", "s")
	if got, want := sub.mustFrame(wait), pushFrame(true, "ssubscribe", "s", ":1"); got != want {
		t.Fatalf("ssubscribe %q, want %q", got, want)
	}
	pub.send("SPUBLISH", "s", "sm")
	if got := pub.mustFrame(wait); got != ":1\r\n" {
		t.Fatalf("SPUBLISH answered %q", got)
	}
	if got, want := sub.mustFrame(wait), pushFrame(true, "smessage", "s", "sm"); got != want {
		t.Fatalf("smessage %q, want %q", got, want)
	}
	sub.send("RESET")
	if got := sub.mustFrame(wait); got != "+RESET\r\n" {
		t.Fatalf("RESET: %q", got)
	}
	// The masters drop the hub's subscription a round trip after RESET;
	// until then they count it.
	deadline := time.Now().Add(2 * time.Second)
	for {
		pub.send("PUBLISH", "c", "after")
		got := pub.mustFrame(wait)
		if got == ":0\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUBLISH after the subscriber's RESET answered %q, want :0", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sub.none(200 * time.Millisecond)
}

// TestSubscribedThenReleased: a client told it is subscribed hears a
// release made right after, on another proxy: the confirmation waits for a
// quorum of masters to have the subscription. Without that wait the
// message is published before the masters know of the subscription and is
// lost (run it with the wait taken out of awaitConfirmed to see it fail).
func TestSubscribedThenReleased(t *testing.T) {
	a, b := twoProxies(t, "")
	wait := 5 * time.Second
	pub := b.respConn()
	for i := 0; i < 30; i++ {
		sub := a.respConn()
		ch := "redisson_lock__channel:{l" + string(rune('a'+i%26)) + "}" + strings.Repeat("x", i)
		sub.send("SUBSCRIBE", ch)
		sub.mustFrame(wait)
		pub.send("PUBLISH", ch, "0")
		if got := pub.mustFrame(wait); got != ":1\r\n" {
			t.Fatalf("round %d: PUBLISH right after the confirmation answered %q, want :1", i, got)
		}
		if got, want := sub.mustFrame(wait), pushFrame(false, "message", ch, "0"); got != want {
			t.Fatalf("round %d: %q, want %q", i, got, want)
		}
		sub.conn.Close()
	}
}

// TestKeyspaceNotifications: a lock granted, released and expired through
// one proxy is notified once each to a keyspace subscriber of the other.
func TestKeyspaceNotifications(t *testing.T) {
	a, b := twoProxies(t, "KEA")
	sub := a.respConn()
	wait := 5 * time.Second
	sub.send("PSUBSCRIBE", "__keyspace@0__:lock:*")
	sub.mustFrame(wait)
	cl := b.client()
	ctx := context.Background()
	if ok, err := cl.SetNX(ctx, "lock:a", "t1", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	if n, err := cl.Del(ctx, "lock:a").Result(); err != nil || n != 1 {
		t.Fatalf("DEL: %v %v", n, err)
	}
	if ok, err := cl.SetNX(ctx, "lock:b", "t1", 300*time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	want := []string{
		pushFrame(false, "pmessage", "__keyspace@0__:lock:*", "__keyspace@0__:lock:a", "set"),
		pushFrame(false, "pmessage", "__keyspace@0__:lock:*", "__keyspace@0__:lock:a", "expire"),
		pushFrame(false, "pmessage", "__keyspace@0__:lock:*", "__keyspace@0__:lock:a", "del"),
		pushFrame(false, "pmessage", "__keyspace@0__:lock:*", "__keyspace@0__:lock:b", "set"),
		pushFrame(false, "pmessage", "__keyspace@0__:lock:*", "__keyspace@0__:lock:b", "expire"),
		pushFrame(false, "pmessage", "__keyspace@0__:lock:*", "__keyspace@0__:lock:b", "expired"),
	}
	for i, w := range want {
		if got := sub.mustFrame(wait); got != w {
			t.Fatalf("notification %d: %q, want %q", i, got, w)
		}
	}
	// A refused acquisition and a DEL of nothing notify nothing.
	cl.SetNX(ctx, "lock:c", "t1", 10*time.Second)
	cl.SetNX(ctx, "lock:c", "t2", 10*time.Second)
	cl.Del(ctx, "lock:none")
	got := []string{sub.mustFrame(wait), sub.mustFrame(wait)}
	if !strings.HasSuffix(got[0], bulk("set")) || !strings.HasSuffix(got[1], bulk("expire")) {
		t.Fatalf("one grant of lock:c: %q", got)
	}
	sub.none(300 * time.Millisecond)

	c := a.client()
	if v, err := c.ConfigGet(ctx, "notify-keyspace-events").Result(); err != nil || v["notify-keyspace-events"] != "AKE" {
		t.Fatalf("CONFIG GET notify-keyspace-events: %v %v", v, err)
	}
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "Kgx").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "KQ").Err(); err == nil ||
		err.Error() != "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'." {
		t.Fatalf("bad flags: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err == nil || !strings.Contains(err.Error(), "notify-keyspace-events only") {
		t.Fatalf("CONFIG SET maxmemory: %v", err)
	}
	for i, m := range a.masters {
		if v, err := m.Do("CONFIG", "GET", "notify-keyspace-events"); err != nil || strings.Contains(v, "K") {
			t.Fatalf("master %d's notify-keyspace-events changed: %q %v", i, v, err)
		}
	}
}

// TestKeyspaceExpiredOfEarlierGrant: a lock granted where no event was
// emitted (the granting proxy's notifications are off, or this proxy
// started later) still gets its expired notification: subscribing to the
// key's channel reads its quorum PTTL.
func TestKeyspaceExpiredOfEarlierGrant(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	a, b := startHubFront(t, masters, "KEA"), startHubFront(t, masters, "")
	ctx := context.Background()
	if ok, err := b.client().SetNX(ctx, "lock:early", "t", 700*time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	sub := a.respConn()
	sub.send("SUBSCRIBE", "__keyspace@0__:lock:early")
	sub.mustFrame(5 * time.Second)
	start := time.Now()
	if got, want := sub.mustFrame(5*time.Second), pushFrame(false, "message", "__keyspace@0__:lock:early", "expired"); got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("expired came %v after subscribing to a lock with 700ms left", el)
	}
	if ok, err := a.client().SetNX(ctx, "lock:early", "w", time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX right after the expired notification: %v %v (the notification came too early)", ok, err)
	}
}
