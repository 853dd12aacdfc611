package pubsub

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

func TestSubscriptionLimits(t *testing.T) {
	masters := redisproc.ForTest(t, 1)

	t.Run("per subscriber", func(t *testing.T) {
		cfg := testConfig(t, masters)
		cfg.MaxPerSubscriber = 2
		h := startHub(t, cfg)
		s := &recorder{}
		h.Subscribe(s, Channel, "a")
		h.Subscribe(s, Shard, "b") // shard channels count too
		if _, err := h.Subscribe(s, Pattern, "c*"); !errors.Is(err, ErrSubscriberLimit) {
			t.Fatalf("third subscription: %v, want ErrSubscriberLimit", err)
		}
		if c, err := h.Subscribe(s, Channel, "a"); err != nil || c != 1 {
			t.Fatalf("subscribing again to a held channel: %d, %v", c, err)
		}
		if _, err := h.Subscribe(&recorder{}, Pattern, "c*"); err != nil {
			t.Fatalf("another subscriber is not limited by the first: %v", err)
		}
	})

	t.Run("total", func(t *testing.T) {
		cfg := testConfig(t, masters)
		cfg.MaxSubscriptions = 3
		h := startHub(t, cfg)
		for i := range 3 {
			if _, err := h.Subscribe(&recorder{}, Channel, "a"); err != nil {
				t.Fatalf("subscriber %d: %v", i, err)
			}
		}
		s := &recorder{}
		if _, err := h.Subscribe(s, Channel, "a"); !errors.Is(err, ErrTooManySubscriptions) {
			t.Fatalf("fourth subscription: %v, want ErrTooManySubscriptions", err)
		}
		if st := h.Stats(); st.Subscriptions != 3 || st.Channels != 1 {
			t.Fatalf("a refused subscription left state behind: %+v", st)
		}
	})

	t.Run("distinct channels", func(t *testing.T) {
		cfg := testConfig(t, masters)
		cfg.MaxChannels = 2
		h := startHub(t, cfg)
		h.Subscribe(&recorder{}, Channel, "a")
		h.Subscribe(&recorder{}, Pattern, "b*")
		s := &recorder{}
		if _, err := h.Subscribe(s, Shard, "c"); !errors.Is(err, ErrTooManyChannels) {
			t.Fatalf("third distinct channel: %v, want ErrTooManyChannels", err)
		}
		if _, err := h.Subscribe(s, Channel, "a"); err != nil {
			t.Fatalf("a channel the hub holds is not a new one: %v", err)
		}
		h.Remove(s)
	})

	t.Run("reserved", func(t *testing.T) {
		h := startHub(t, testConfig(t, masters))
		if _, err := h.Subscribe(&recorder{}, Channel, "lockproxy:events"); !errors.Is(err, ErrReserved) {
			t.Fatalf("subscribing to the events channel: %v, want ErrReserved", err)
		}
		if !h.Reserved("lockproxy:events") || h.Reserved("lockproxy:other") {
			t.Fatal("Reserved is wrong about the events channel")
		}
	})
}

// A pattern subscriber never sees lockproxy's events, nor a client's
// forged payload on the events channel, which is counted and dropped.
func TestEventsChannelIsNotForClients(t *testing.T) {
	masters := redisproc.ForTest(t, 2)
	cfg := testConfig(t, masters)
	pub := NewConnPublisher(cfg.Masters, nil, "", "", 0)
	defer pub.Close()
	cfg.Publisher = pub
	h := startHub(t, cfg)
	all := &recorder{}
	subscribe(t, h, all, Pattern, "*", 2)
	ready(t, h)
	log := &eventLog{}
	h.Listen(log.on)
	for _, bad := range []string{"", "1", "1 x 0 1 0 k", "2 x 1 1 0 k", "1 x 1 9 0 k", "1 x 1 1 -5 k", "1  1 1 0 k", "garbage"} {
		do(t, masters[0], "PUBLISH", "lockproxy:events", bad)
	}
	if err := h.Emit(Event{Type: EventDel, Key: "k with spaces\r\n"}); err != nil {
		t.Fatal(err)
	}
	do(t, masters[0], "PUBLISH", "other", "x") // masters deliver in order: this comes last
	wantCount(t, "pattern subscriber", all, 1)
	waitFor(t, "the forged events", func() bool { return h.Stats().BadEvents == 8 })
	if got := all.payloads(); got[0] != "*>other=x" {
		t.Fatalf("pattern subscriber got %q", got)
	}
	if evs := log.events(); len(evs) != 1 || evs[0].Key != "k with spaces\r\n" {
		t.Fatalf("listener heard %+v", evs)
	}
}

// The dedup memory is bounded: with copies that never come (published on
// one master only), the hub remembers at most MaxDedupEntries messages.
func TestDedupMemoryBoundOnMasters(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	cfg := testConfig(t, masters)
	cfg.MaxDedupEntries = 4
	h := startHub(t, cfg)
	r := &recorder{}
	subscribe(t, h, r, Channel, "ch", 3)
	for i := range 10 {
		do(t, masters[0], "PUBLISH", "ch", fmt.Sprint(i))
	}
	wantCount(t, "subscriber", r, 10)
	if st := h.Stats(); st.DedupEntries != 4 || st.DedupEvicted != 6 {
		t.Fatalf("dedup holds %d entries, evicted %d; want 4 and 6", st.DedupEntries, st.DedupEvicted)
	}
}

// A message longer than MaxPayload is skipped, counted, and the
// connection carries on.
func TestOversizeMessageSkipped(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	cfg := testConfig(t, masters)
	cfg.MaxPayload = 64
	h := startHub(t, cfg)
	r := &recorder{}
	subscribe(t, h, r, Channel, "ch", 1)
	do(t, masters[0], "PUBLISH", "ch", strings.Repeat("x", 65))
	do(t, masters[0], "PUBLISH", "ch", "small")
	wantCount(t, "subscriber", r, 1)
	if st := h.Stats(); st.Oversize != 1 || st.Connects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The expiry schedule is bounded: past MaxExpiries a key gets no expired
// notification.
func TestExpiryScheduleBound(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	cfg := testConfig(t, masters)
	cfg.MaxExpiries = 2
	cfg.KeyspaceEvents = "Ex"
	pub := NewConnPublisher(cfg.Masters, nil, "", "", 0)
	defer pub.Close()
	cfg.Publisher = pub
	h := startHub(t, cfg)
	for i := range 5 {
		h.Emit(Event{Type: EventSet, Key: fmt.Sprint("k", i), TTL: 50 * time.Second})
	}
	if st := h.Stats(); st.Expiries != 2 || st.ExpiriesDropped != 3 {
		t.Fatalf("%d expiries scheduled, %d dropped; want 2 and 3", st.Expiries, st.ExpiriesDropped)
	}
}

// TestOneSubscriberCannotTakeEveryChannel: with the default limits, one
// subscriber subscribing as many channels as the hub may hold is stopped
// at its own limit, well before the hub's, and another subscriber (a lock
// waiter) can still subscribe. With MaxPerSubscriber defaulting to
// MaxChannels, the flood took every channel and the waiter got
// ErrTooManyChannels.
func TestOneSubscriberCannotTakeEveryChannel(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	h := startHub(t, testConfig(t, masters)) // default limits
	flood := &recorder{}
	var refused error
	for i := range 10_000 {
		if _, err := h.Subscribe(flood, Channel, fmt.Sprint("flood:", i)); err != nil {
			refused = err
			break
		}
	}
	if _, err := h.Subscribe(&recorder{}, Channel, "lock:waiter"); err != nil {
		t.Errorf("another subscriber after the flood: %v", err)
	}
	if !errors.Is(refused, ErrSubscriberLimit) {
		t.Errorf("one subscriber's flood of 10,000 channels ended with %v, want ErrSubscriberLimit", refused)
	}
	if st := h.Stats(); st.Channels > 1_001 {
		t.Errorf("the hub holds %d channels, want at most 1,000 of the flood (a tenth of MaxChannels) and the waiter's", st.Channels)
	}
}

// TestPerSubscriberLimitNotAboveTotal: a per-subscriber limit above the
// hub's is refused, naming both.
func TestPerSubscriberLimitNotAboveTotal(t *testing.T) {
	cfg := Config{Masters: []string{"127.0.0.1:1"}, MaxChannels: 100, MaxPerSubscriber: 101}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "MaxPerSubscriber (101) exceeds MaxChannels (100)") {
		t.Fatalf("New with MaxPerSubscriber > MaxChannels: %v", err)
	}
}

// TestPatternLimits: a pattern over MaxPatternLen, a subscriber's pattern
// past MaxPatternsPerSubscriber and a new pattern past MaxPatterns are
// refused with their own errors (the defaults: 256 bytes, 100, 1,000);
// channels are not patterns.
func TestPatternLimits(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	h := startHub(t, testConfig(t, masters)) // default limits
	s := &recorder{}
	if _, err := h.Subscribe(s, Pattern, strings.Repeat("*a", MaxPatternLen/2)+"b"); !errors.Is(err, ErrPatternTooLong) {
		t.Fatalf("pattern of %d bytes: %v, want ErrPatternTooLong", MaxPatternLen+1, err)
	}
	if _, err := h.Subscribe(s, Channel, strings.Repeat("c", MaxPatternLen+1)); err != nil {
		t.Fatalf("a channel is not a pattern: %v", err)
	}
	subs := make([]*recorder, 11)
	for i := range subs {
		subs[i] = &recorder{}
		for j := range 100 {
			p := fmt.Sprintf("%s%d:%d*", strings.Repeat("*a", 120), i, j)
			if _, err := h.Subscribe(subs[i], Pattern, p); i < 10 && err != nil {
				t.Fatalf("subscriber %d, pattern %d: %v", i, j, err)
			} else if i == 10 && !errors.Is(err, ErrTooManyPatterns) {
				t.Fatalf("pattern 1,%03d on the hub: %v, want ErrTooManyPatterns", j, err)
			}
		}
	}
	if _, err := h.Subscribe(subs[0], Pattern, "one-more*"); !errors.Is(err, ErrSubscriberPatternLimit) {
		t.Fatalf("a subscriber's 101st pattern: %v, want ErrSubscriberPatternLimit", err)
	}
	if _, err := h.Subscribe(subs[0], Channel, "lock:x"); err != nil {
		t.Fatalf("a channel past the subscriber's pattern limit: %v", err)
	}
	if _, err := h.Subscribe(subs[10], Pattern, strings.Repeat("*a", 120)+"0:0*"); err != nil {
		t.Fatalf("a pattern the hub holds is not a new one: %v", err)
	}
	h.Remove(subs[3])
	if _, err := h.Subscribe(subs[10], Pattern, "now-there-is-room*"); err != nil {
		t.Fatalf("a new pattern once another subscriber left: %v", err)
	}
}

// TestPublishMatchingBounded: PUBLISH's receiver count matches the channel
// against every pattern the hub holds and every dropped one a master has
// not confirmed, on the event loop. The most the limits allow, 1,000 of
// each, 256 bytes built to make Redis's matcher retry a long run at every
// byte (Match: 2 to 5ms each on a 4 KiB channel, seconds in all), answer
// many times faster than Match would (matchAdvantage). The master is paused so that no UNSUBSCRIBE is
// confirmed; dropped patterns past MaxPatterns are forgotten.
func TestPublishMatchingBounded(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	cfg := testConfig(t, masters)
	cfg.ReadTimeout = time.Minute // the paused master's connection stays up
	h := startHub(t, cfg)
	ready(t, h)
	if err := masters[0].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { masters[0].Resume() })
	flood := func(round int) []*recorder {
		subs := make([]*recorder, 10)
		for i := range subs {
			subs[i] = &recorder{}
			for j := range 100 {
				p := fmt.Sprintf("*%s[b%d]*", strings.Repeat("a", 240), round*1000+i*100+j)
				if len(p) > MaxPatternLen {
					t.Fatalf("pattern of %d bytes", len(p))
				}
				if _, err := h.Subscribe(subs[i], Pattern, p); err != nil {
					t.Fatalf("round %d, subscriber %d, pattern %d: %v", round, i, j, err)
				}
			}
		}
		return subs
	}
	for round := range 3 {
		for _, s := range flood(round) {
			h.Remove(s)
		}
	}
	flood(3)
	h.mu.Lock()
	held, leaving := len(h.patterns), len(h.leavingPats)
	h.mu.Unlock()
	if held != 1000 || leaving != 1000 {
		t.Fatalf("%d patterns held and %d leaving, want 1,000 and at most 1,000", held, leaving)
	}
	channel := strings.Repeat("a", 4096)
	d := time.Duration(math.MaxInt64)
	for range 3 { // the least of 3: a run the scheduler interrupts says nothing
		start := time.Now()
		if n := h.Receivers(Channel, channel, []int64{-1}, Owned{}); n != 0 {
			t.Fatalf("receivers %d, want 0", n)
		}
		d = min(d, time.Since(start))
	}
	// The bound is relative, so that it holds on a slow machine: Redis's
	// own matcher (Match) over the same patterns, timed here on a sample.
	// The compiled matchers must be matchAdvantage times faster; one that
	// retried at every byte as Match does would be about as slow.
	const sample = 20
	start := time.Now()
	for i := range sample {
		if Match(fmt.Sprintf("*%s[b%d]*", strings.Repeat("a", 240), 3000+i), channel) {
			t.Fatal("Match matched a pattern that cannot match")
		}
	}
	naive := time.Since(start) / sample * time.Duration(held+leaving)
	t.Logf("PUBLISH's count against %d held and %d leaving patterns: %v; through Match about %v", held, leaving, d, naive)
	if d > naive/matchAdvantage {
		t.Fatalf("PUBLISH's count against %d held and %d leaving patterns took %v, over 1/%d of Match's %v", held, leaving, d, matchAdvantage, naive)
	}
}
