package pubsub

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// eventLog is a listener that keeps the events it hears.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) on(ev Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *eventLog) events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.evs...)
}

func (l *eventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs)
}

// Events reach the listeners of both proxies exactly once, with a master
// down: from whichever live master's copy comes first.
func TestEventsExactlyOnceWithMasterDown(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	hubs := make([]*Hub, 2)
	logs := make([]*eventLog, 2)
	for i := range hubs {
		cfg := testConfig(t, masters)
		cfg.InstanceID = fmt.Sprint("proxy", i)
		pub := NewConnPublisher(cfg.Masters, nil, "", "", 0)
		t.Cleanup(pub.Close)
		cfg.Publisher = pub
		hubs[i], logs[i] = startHub(t, cfg), &eventLog{}
		hubs[i].Listen(logs[i].on)
		ready(t, hubs[i])
	}
	if err := masters[2].Kill(); err != nil {
		t.Fatal(err)
	}
	for _, h := range hubs {
		waitFor(t, "the hub to see the master down", func() bool { return h.Stats().MastersUp == 2 })
	}
	const each = 50
	types := []EventType{EventSet, EventExpire, EventDel, EventPush}
	for i := range each {
		for p, h := range hubs {
			ev := Event{Type: types[i%len(types)], Key: fmt.Sprintf("k%d-%d", p, i), TTL: time.Second}
			if err := h.Emit(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, h := range hubs {
		// Own events: delivered at Emit, both live masters' copies
		// dropped. The other's: the first copy delivered, one dropped.
		waitFor(t, "every copy of every event", func() bool { return h.Stats().EventDuplicates >= 3*each })
		st := h.Stats()
		if st.Events != 2*each || st.EventDuplicates != 3*each || logs[i].len() != 2*each {
			t.Fatalf("hub %d: %d events (%d heard), %d duplicates; want %d and %d", i, st.Events, logs[i].len(), st.EventDuplicates, 2*each, 3*each)
		}
		seen := map[string]bool{}
		for _, ev := range logs[i].events() {
			id := fmt.Sprint(ev.Origin, "/", ev.Seq)
			if seen[id] {
				t.Fatalf("hub %d heard %s twice", i, id)
			}
			seen[id] = true
			if want := fmt.Sprintf("k%s-%d", ev.Origin[len("proxy"):], ev.Seq-1); ev.Key != want || ev.Type != types[(ev.Seq-1)%4] || ev.TTL != time.Second {
				t.Fatalf("hub %d heard %+v, want key %s", i, ev, want)
			}
		}
	}
}

// A master restarted empty gets every subscription again (channel,
// pattern, shard, the events channel) and its messages are delivered; a
// paused master's connection is given up after ReadTimeout and made again
// once it answers.
func TestResubscribeAfterMasterRestartAndPause(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	h := startHub(t, testConfig(t, masters))
	ready(t, h)
	sc, sp, ss := &recorder{}, &recorder{}, &recorder{}
	subscribe(t, h, sc, Channel, "ch", 3)
	subscribe(t, h, sp, Pattern, "p*", 3)
	subscribe(t, h, ss, Shard, "sh", 3)
	all := func(n int) func() bool {
		return func() bool {
			return h.confirmedOn(Channel, "ch") == n && h.confirmedOn(Pattern, "p*") == n &&
				h.confirmedOn(Shard, "sh") == n && h.confirmedOn(Channel, h.cfg.EventsChannel) == n
		}
	}
	publishOn := func(m *redisproc.Server, tag string) {
		do(t, m, "PUBLISH", "ch", tag)
		do(t, m, "PUBLISH", "p1", tag)
		do(t, m, "SPUBLISH", "sh", tag)
	}
	connects := h.Stats().Connects

	if err := masters[0].Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscriptions lost on the killed master", all(2))
	if err := masters[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscriptions made again on the restarted master", all(3))
	publishOn(masters[0], "after-restart") // on that master only
	for name, r := range map[string]*recorder{"channel": sc, "pattern": sp, "shard": ss} {
		wantCount(t, name, r, 1)
	}

	if err := masters[1].Pause(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the paused master's connection given up", all(2))
	publishOn(masters[2], "while-paused") // the live masters still deliver
	for name, r := range map[string]*recorder{"channel": sc, "pattern": sp, "shard": ss} {
		wantCount(t, name, r, 2)
	}
	if err := masters[1].Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscriptions made again on the resumed master", all(3))
	publishOn(masters[1], "after-resume")
	for name, r := range map[string]*recorder{"channel": sc, "pattern": sp, "shard": ss} {
		wantCount(t, name, r, 3)
	}
	if got := h.Stats().Connects - connects; got < 2 {
		t.Fatalf("%d new connections, want at least 2", got)
	}
}

// A hub with an unreachable master works with the others and closes
// promptly while it retries.
func TestUnreachableMasterAndClose(t *testing.T) {
	masters := redisproc.ForTest(t, 2)
	if err := masters[1].Stop(); err != nil {
		t.Fatal(err)
	}
	h, err := New(testConfig(t, masters))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	subscribe(t, h, r, Channel, "ch", 1)
	do(t, masters[0], "PUBLISH", "ch", "x")
	wantCount(t, "subscriber", r, 1)
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while a master was unreachable")
	}
	if _, err := h.Subscribe(r, Channel, "x"); err != ErrClosed {
		t.Fatalf("Subscribe after Close: %v", err)
	}
}

// AUTH with the configured password; a wrong one keeps the master down
// (and says why) instead of subscribing unauthenticated.
func TestAuth(t *testing.T) {
	m, err := redisproc.Start(redisproc.Options{Dir: t.TempDir(), ExtraArgs: []string{"--requirepass", "s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop() })
	cfg := testConfig(t, []*redisproc.Server{m})
	cfg.Username, cfg.Password = "default", "s3cret"
	h := startHub(t, cfg)
	r := &recorder{}
	subscribe(t, h, r, Channel, "ch", 1)
	pub := NewConnPublisher(cfg.Masters, nil, "", "s3cret", 0)
	defer pub.Close()
	if got := pub.PublishReplies("PUBLISH", "ch", []byte("x")); got[0] != 1 {
		t.Fatalf("PUBLISH through an authenticated publisher answered %v", got)
	}
	wantCount(t, "subscriber", r, 1)

	cfg.Password = "wrong"
	bad := startHub(t, cfg)
	if _, err := bad.Subscribe(r, Channel, "ch"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "attempts refused", func() bool { return bad.Stats().ConnectErrors >= 2 })
	if st := bad.Stats(); st.MastersUp != 0 || st.Connects != 0 {
		t.Fatalf("a hub with a wrong password connected: %+v", st)
	}
}

// An ACL user: a refused CLIENT SETNAME costs only the name; a channel the
// user may not read stays unconfirmed (counted, logged once) while the
// others work. No password where one is required fails the connection.
func TestACLUserAndMissingPassword(t *testing.T) {
	m := redisproc.ForTest(t, 1)[0]
	do(t, m, "ACL", "SETUSER", "lp", "on", ">pw", "resetchannels", "&allowed*", "-@all",
		"+subscribe", "+unsubscribe", "+psubscribe", "+punsubscribe", "+ssubscribe", "+sunsubscribe", "+ping")
	cfg := testConfig(t, []*redisproc.Server{m})
	cfg.Username, cfg.Password = "lp", "pw"
	h := startHub(t, cfg)
	r := &recorder{}
	subscribe(t, h, r, Channel, "allowed1", 1)
	if _, err := h.Subscribe(r, Channel, "forbidden"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusals", func() bool { return h.Stats().Refused >= 2 }) // events channel, forbidden
	do(t, m, "PUBLISH", "allowed1", "x")
	wantCount(t, "subscriber", r, 1)
	if n := h.confirmedOn(Channel, "forbidden"); n != 0 {
		t.Fatalf("a refused subscription counts as confirmed on %d masters", n)
	}

	do(t, m, "CONFIG", "SET", "requirepass", "s3cret")
	nopw := startHub(t, testConfig(t, []*redisproc.Server{m}))
	waitFor(t, "attempts refused", func() bool { return nopw.Stats().ConnectErrors >= 2 })
	if st := nopw.Stats(); st.Connects != 0 {
		t.Fatalf("a hub without the password connected: %+v", st)
	}
}
