package pubsub

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// settled waits until every copy the masters owe h has arrived and been
// recognized: then no further delivery can come of what was published.
func settled(t *testing.T, h *Hub, dups uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d duplicates recognized", dups), func() bool {
		s := h.Stats()
		return s.Duplicates >= dups && s.DedupEntries == 0
	})
	if s := h.Stats(); s.Duplicates != dups {
		t.Fatalf("%d duplicates recognized, want %d", s.Duplicates, dups)
	}
}

func wantCount(t *testing.T, name string, r *recorder, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to get %d messages", name, n), func() bool { return r.len() >= n })
	if got := r.payloads(); len(got) != n {
		t.Fatalf("%s got %d messages, want %d: %q", name, len(got), n, got)
	}
}

// The lock scripts of Redisson (publish and Redisson 4's spublish) and
// Spring run on every master, as lockproxy forwards them; two proxies'
// hubs each deliver every release once to each of their subscribers.
func TestScriptReleaseOncePerSubscriberOnEveryHub(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	n := len(masters)
	a, b := startHub(t, testConfig(t, masters)), startHub(t, testConfig(t, masters))
	const (
		lock       = "{L}"
		channel    = "redisson_lock__channel:{L}"
		springLock = "spring:L"
		springChan = "spring-int-unlock"
	)
	a1, a2, a3 := &recorder{}, &recorder{}, &recorder{}
	b1, b2, b3 := &recorder{}, &recorder{}, &recorder{}
	subscribe(t, a, a1, Channel, channel, n)
	subscribe(t, a, a2, Pattern, "redisson_lock__channel:*", n)
	subscribe(t, a, a3, Channel, springChan, n)
	subscribe(t, b, b1, Channel, channel, n)
	subscribe(t, b, b2, Shard, channel, n)
	subscribe(t, b, b3, Pattern, "*", n)

	// Three releases with identical messages: each must be delivered, once.
	const rounds = 3
	for round := range rounds {
		onEvery(masters, func(m *redisproc.Server) {
			do(t, m, "HSET", lock, "id:1", "1")
			do(t, m, "EVAL", redisson323Unlock, "2", lock, channel, "0", "30000", "id:1", "publish")
			do(t, m, "HSET", lock, "id:1", "1")
			do(t, m, "EVAL", redisson4Unlock, "3", lock, channel, fmt.Sprint("latch:", round), "0", "30000", "id:1", "spublish", "5000")
			do(t, m, "SET", springLock, "client-1")
			do(t, m, "EVAL", spring7Unlock, "1", springLock, "client-1", springChan)
		})
	}
	wantCount(t, "a1 (SUBSCRIBE)", a1, rounds)
	wantCount(t, "a2 (PSUBSCRIBE)", a2, rounds)
	wantCount(t, "a3 (SUBSCRIBE spring)", a3, rounds)
	wantCount(t, "b1 (SUBSCRIBE)", b1, rounds)
	wantCount(t, "b2 (SSUBSCRIBE)", b2, rounds)
	wantCount(t, "b3 (PSUBSCRIBE *)", b3, 2*rounds)
	// Every logical message came from each of the n masters: n-1 copies
	// each were recognized, and nothing more can arrive.
	settled(t, a, uint64(3*rounds*(n-1)))
	settled(t, b, uint64(4*rounds*(n-1)))
	for name, r := range map[string]*recorder{"a1": a1, "a2": a2, "a3": a3, "b1": b1, "b2": b2, "b3": b3} {
		if r.len() > 2*rounds || (name != "b3" && r.len() != rounds) {
			t.Errorf("%s got %q", name, r.payloads())
		}
	}
	if got := a2.got()[0]; got.Kind != Pattern || got.Pattern != "redisson_lock__channel:*" || got.Channel != channel || string(got.Payload) != "0" {
		t.Errorf("a2's pmessage is %+v", got)
	}
	if got := b2.got()[0]; got.Kind != Shard || got.Channel != channel {
		t.Errorf("b2's smessage is %+v", got)
	}
	if got := a3.payloads()[0]; got != springChan+"="+springLock {
		t.Errorf("spring's message is %q", got)
	}
}

// Two identical payloads published one after the other through the proxy
// (on every master) are two messages for every subscriber, also with five
// masters whose copies interleave freely.
func TestIdenticalPayloadsInARowDeliveredTwice(t *testing.T) {
	masters := redisproc.ForTest(t, 5)
	n := len(masters)
	a, b := startHub(t, testConfig(t, masters)), startHub(t, testConfig(t, masters))
	ra, rb := &recorder{}, &recorder{}
	subscribe(t, a, ra, Channel, "ch", n)
	subscribe(t, b, rb, Channel, "ch", n)
	pub := NewConnPublisher(addrs(masters), nil, "", "", 0)
	defer pub.Close()
	const pairs = 20
	for i := range pairs {
		for range 2 {
			pub.Publish("ch", []byte(fmt.Sprint("x", i)))
		}
	}
	wantCount(t, "a", ra, 2*pairs)
	wantCount(t, "b", rb, 2*pairs)
	settled(t, a, uint64(2*pairs*(n-1)))
	settled(t, b, uint64(2*pairs*(n-1)))
	// Masters deliver in publish order and dedup keeps it: each pair in
	// sequence.
	for _, r := range []*recorder{ra, rb} {
		got := r.payloads()
		for i := range pairs {
			want := fmt.Sprintf("ch=x%d", i)
			if got[2*i] != want || got[2*i+1] != want {
				t.Fatalf("messages out of order: %q", got)
			}
		}
	}
}

// Unsubscribing the last local subscriber unsubscribes on the masters;
// nothing reaches a subscriber after its Unsubscribe returned.
func TestRefCountedMasterSubscriptions(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	h := startHub(t, testConfig(t, masters))
	s1, s2 := &recorder{}, &recorder{}
	subscribe(t, h, s1, Channel, "ch", 3)
	if c, _ := h.Subscribe(s2, Channel, "ch"); c != 1 {
		t.Fatalf("count %d, want 1", c)
	}
	if c, _ := h.Subscribe(s2, Pattern, "c*"); c != 2 {
		t.Fatalf("count %d, want 2 (channels and patterns together, as Redis)", c)
	}
	if c, _ := h.Subscribe(s2, Shard, "ch"); c != 1 {
		t.Fatalf("shard count %d, want 1 (counted apart, as Redis)", c)
	}
	numsub := func() string { return do(t, masters[0], "PUBSUB", "NUMSUB", "ch") }
	if got := numsub(); got != "ch 1" {
		t.Fatalf("master counts %q subscribers: the hub should subscribe once", got)
	}
	if c := h.Unsubscribe(s1, Channel, "ch"); c != 0 {
		t.Fatalf("count after unsubscribe %d", c)
	}
	if got := numsub(); got != "ch 1" {
		t.Fatalf("the hub unsubscribed while s2 still listens: %q", got)
	}
	h.Remove(s2)
	waitFor(t, "masters unsubscribed", func() bool {
		for _, m := range masters {
			if do(t, m, "PUBSUB", "NUMSUB", "ch") != "ch 0" || do(t, m, "PUBSUB", "NUMPAT") != "0" {
				return false
			}
		}
		return true
	})
	if st := h.Stats(); st.Channels != 0 || st.Subscriptions != 0 {
		t.Fatalf("stats after Remove: %+v", st)
	}
	do(t, masters[0], "PUBLISH", "ch", "late")
	if s1.len()+s2.len() != 0 {
		t.Fatalf("unsubscribed subscribers got %q %q", s1.payloads(), s2.payloads())
	}
	if names := h.Subscriptions(s2, Channel); len(names) != 0 {
		t.Fatalf("Subscriptions after Remove: %q", names)
	}
}

// A subscriber over its output limit is cut (it removes itself, as a
// connection does) while the others get everything; the hub never waits
// for it.
func TestSlowSubscriberIsCutOthersGetAll(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	h := startHub(t, testConfig(t, masters))
	fast := &recorder{}
	slow := &limited{limit: 16 << 10, closing: make(chan struct{}, 1)}
	go func() { // the slow connection's own goroutine
		<-slow.closing
		h.Remove(slow)
	}()
	subscribe(t, h, fast, Channel, "ch", 3)
	subscribe(t, h, slow, Channel, "ch", 3)
	pub := NewConnPublisher(addrs(masters), nil, "", "", 0)
	defer pub.Close()
	payload := []byte(strings.Repeat("p", 1024))
	const msgs = 200
	for range msgs {
		pub.Publish("ch", payload)
	}
	wantCount(t, "fast", fast, msgs)
	waitFor(t, "the slow subscriber removed", func() bool { return h.Stats().Subscriptions == 1 })
	if got := slow.buffered(); got > slow.limit+len(payload) {
		t.Fatalf("slow subscriber buffered %d bytes over a %d limit", got, slow.limit)
	}
	if got := h.Subscriptions(slow, Channel); !slices.Equal(got, nil) {
		t.Fatalf("slow still subscribed to %q", got)
	}
}

// limited is a connection that never writes out: its buffer fills, and
// over its limit it stops taking messages and asks its own goroutine to
// close it, like Redis's client-output-buffer-limit pubsub.
type limited struct {
	limit   int
	closing chan struct{} // capacity 1
	n       atomic.Int64  // bytes buffered
	over    atomic.Bool
}

func (l *limited) Deliver(m Message) {
	if l.over.Load() {
		return
	}
	if l.n.Add(int64(len(m.Payload))) > int64(l.limit) {
		l.over.Store(true)
		l.closing <- struct{}{} // never blocks: sent once
	}
}

func (l *limited) buffered() int { return int(l.n.Load()) }
