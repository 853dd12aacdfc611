package pubsub

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// ParseKeyspaceEvents and String agree with Redis's CONFIG SET / GET.
func TestKeyspaceEventsLikeRedis(t *testing.T) {
	m := redisproc.ForTest(t, 1)[0]
	for _, in := range []string{"", "KEA", "Ex", "gx$K", "AKEm", "Kn", "KEA$", "lshzxetd", "g$lshzxetdKE", "EKdn", "xxK", "KEq", "A!"} {
		f, err := ParseKeyspaceEvents(in)
		_, rerr := m.Do("CONFIG", "SET", "notify-keyspace-events", in)
		if (err != nil) != (rerr != nil) {
			t.Errorf("%q: we say %v, redis says %v", in, err, rerr)
			continue
		}
		if err != nil {
			continue
		}
		got := do(t, m, "CONFIG", "GET", "notify-keyspace-events")
		if want := "notify-keyspace-events " + f.String(); got != want && !(f == 0 && got == "notify-keyspace-events ") {
			t.Errorf("%q: we render %q, redis %q", in, f.String(), got)
		}
	}

	// What one Redis notifies for a lock's life, which the hub mirrors
	// for EventSet and EventDel.
	do(t, m, "CONFIG", "SET", "notify-keyspace-events", "KA")
	sub := dialRaw(t, m.Addr)
	sub.send(t, "SUBSCRIBE", "__keyspace@0__:gt")
	sub.next(t)
	do(t, m, "SET", "gt", "token", "NX", "PX", "100000")
	do(t, m, "DEL", "gt")
	var got []string
	for range 3 {
		got = append(got, string(sub.next(t).Elems[2].Str))
	}
	if fmt.Sprint(got) != "[set expire del]" {
		t.Fatalf("redis notifies %q for SET NX PX and DEL", got)
	}
}

// Keyspace notifications are synthesized from events, once per logical
// event on each proxy, with expired scheduled from the TTL plus drift and
// cancelled by a del; masters' own notifications are not passed on, and a
// subscription only keyspace channels can match is not made on masters.
func TestKeyspaceNotificationsFromEvents(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	cfgA, cfgB := testConfig(t, masters), testConfig(t, masters)
	pub := NewConnPublisher(cfgB.Masters, nil, "", "", 0)
	defer pub.Close()
	cfgB.Publisher = pub
	a, b := startHub(t, cfgA), startHub(t, cfgB)
	if err := a.SetKeyspaceEvents("KEA"); err != nil {
		t.Fatal(err)
	}
	if got := a.KeyspaceEvents(); got != "AKE" {
		t.Fatalf("KeyspaceEvents = %q", got)
	}
	ready(t, a)
	ready(t, b)

	// Masters' own notifications never pass (here one master's, turned on
	// behind lockproxy's back).
	star := &recorder{}
	subscribe(t, a, star, Pattern, "*", 3)
	do(t, masters[0], "CONFIG", "SET", "notify-keyspace-events", "KEA")
	do(t, masters[0], "SET", "foo", "bar")
	do(t, masters[0], "PUBLISH", "other", "x")
	wantCount(t, "star", star, 1)
	if got := star.payloads(); got[0] != "*>other=x" {
		t.Fatalf("a master's keyspace notification passed: %q", got)
	}
	a.Remove(star)

	ks, expired, del, offB := &recorder{}, &recorder{}, &recorder{}, &recorder{}
	for _, s := range []struct {
		r    *recorder
		kind Kind
		name string
	}{
		{ks, Pattern, "__keyspace@0__:lock:*"},
		{expired, Channel, "__keyevent@0__:expired"},
		{del, Channel, "__keyevent@0__:del"},
	} {
		if _, err := a.Subscribe(s.r, s.kind, s.name); err != nil {
			t.Fatal(err)
		}
	}
	b.Subscribe(offB, Pattern, "__key*") // b synthesizes nothing: flags ""
	if n := a.confirmedOn(Pattern, "__keyspace@0__:lock:*"); n != 0 {
		t.Fatalf("a keyspace-only pattern was subscribed on %d masters", n)
	}
	// Only b's "__key*" (it can match other channels) is on the masters.
	waitFor(t, "one pattern on the masters", func() bool { return do(t, masters[1], "PUBSUB", "NUMPAT") == "1" })

	const ttl = 80 * time.Millisecond
	t0 := time.Now()
	for _, ev := range []Event{
		{Type: EventSet, Key: "lock:1", TTL: ttl},
		{Type: EventSet, Key: "lock:2", TTL: ttl},
		{Type: EventDel, Key: "lock:2"},
		{Type: EventSet, Key: "lock:3", TTL: ttl},
		{Type: EventExpire, Key: "lock:3", TTL: 3 * ttl},
	} {
		if err := b.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	wantCount(t, "expired (lock:1)", expired, 1)
	if d, min := time.Since(t0), ttl+time.Duration(float64(ttl)*0.01)+2*time.Millisecond; d < min {
		t.Fatalf("expired came %v after the set, before ttl+drift %v", d, min)
	}
	// lock:2's would come before lock:3's: once lock:3's is here, its
	// absence is final.
	wantCount(t, "expired (lock:1, lock:3)", expired, 2)
	want := []string{
		"__keyspace@0__:lock:*>__keyspace@0__:lock:1=set",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:1=expire",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:2=set",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:2=expire",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:2=del",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:3=set",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:3=expire",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:3=expire",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:1=expired",
		"__keyspace@0__:lock:*>__keyspace@0__:lock:3=expired",
	}
	if got := ks.payloads(); !slices.Equal(got, want) {
		t.Fatalf("keyspace subscriber got\n%q\nwant\n%q", got, want)
	}
	if got := fmt.Sprint(expired.payloads(), del.payloads()); got != "[__keyevent@0__:expired=lock:1 __keyevent@0__:expired=lock:3] [__keyevent@0__:del=lock:2]" {
		t.Fatalf("keyevent subscribers got %s", got)
	}
	if offB.len() != 0 || b.Stats().Expiries != 0 {
		t.Fatalf("a hub without keyspace flags notified %q", offB.payloads())
	}
	if st := a.Stats(); st.Expiries != 0 || st.Events != 5 {
		t.Fatalf("stats %+v", st)
	}

	// ScheduleExpiry: for a lock granted before this proxy heard of it.
	a.ScheduleExpiry("lock:8", time.Hour)
	a.ScheduleExpiry("lock:8", 0) // cancelled
	a.ScheduleExpiry("lock:9", ttl)
	wantCount(t, "expired (lock:9)", expired, 3)
	if got := expired.payloads()[2]; got != "__keyevent@0__:expired=lock:9" {
		t.Fatalf("got %q", got)
	}
}

func TestKeyspaceSubscriptionClasses(t *testing.T) {
	for _, c := range []struct {
		kind            Kind
		name            string
		local, mayMatch bool
	}{
		{Channel, "__keyspace@0__:lock", true, false},
		{Channel, "__keyevent@0__:expired", true, false},
		{Channel, "lock", false, false},
		{Shard, "__keyspace@0__:lock", false, false},
		{Pattern, "__keyspace@0__:*", true, true},
		{Pattern, "__keyevent@*", true, true},
		{Pattern, "__key*", false, true},
		{Pattern, "*", false, true},
		{Pattern, "_[_]keyspace@0__:*", false, true},
		{Pattern, "redisson_lock__channel:*", false, false},
		{Pattern, "__keyspaces*", false, false},
	} {
		if got := localOnly(c.kind, c.name); got != c.local {
			t.Errorf("localOnly(%v, %q) = %v", c.kind, c.name, got)
		}
		if c.kind == Pattern && mayMatchKeyspace(c.name) != c.mayMatch {
			t.Errorf("mayMatchKeyspace(%q) = %v", c.name, !c.mayMatch)
		}
	}
}

// TestKeyspaceChannelBounded: the keyspace channel of a key too long for
// any client to SUBSCRIBE to is not notified, so that a 1 MiB lock key is
// not matched against every pattern; its keyevent notification, whose
// channel is short, is.
func TestKeyspaceChannelBounded(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	cfg := testConfig(t, masters)
	cfg.KeyspaceEvents = "KEA"
	h := startHub(t, cfg)
	space, event := &recorder{}, &recorder{}
	for s, p := range map[*recorder]string{space: "__keyspace@0__:*", event: "__keyevent@0__:*"} {
		if _, err := h.Subscribe(s, Pattern, p); err != nil { // served here: no master confirms
			t.Fatal(err)
		}
	}
	fits := strings.Repeat("k", MaxNotifyChannel-len("__keyspace@0__:"))
	h.mu.Lock()
	h.notify(NotifyGeneric, "del", fits)
	h.notify(NotifyGeneric, "del", fits+"k")
	h.notify(NotifyGeneric, "del", strings.Repeat("k", 1<<20))
	h.mu.Unlock()
	if n := space.len(); n != 1 {
		t.Errorf("keyspace notifications: %d, want 1 (the key whose channel fits)", n)
	}
	if n := event.len(); n != 3 {
		t.Errorf("keyevent notifications: %d, want 3", n)
	}
}
