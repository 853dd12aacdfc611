package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestRedislockTTLAgedWhileASlowHolderAnswers: bsm/redislock's Lock.TTL()
// (its pttl script, answered with the Q-th largest PTTL minus drift and the
// time since the command was parsed), read while one holder master is
// slow, must not tell the holder its lock lives longer than a quorum keeps
// it. Without the ageing it said ~node_timeout more, and a second client
// obtained the lock inside that window.
func TestRedislockTTLAgedWhileASlowHolderAnswers(t *testing.T) {
	c := startCluster(t, 3, func(_ *proxy.Config, q *quorum.Config) { q.NodeTimeout = 150 * time.Millisecond })
	b, m2 := c.masters[1], c.masters[2]
	ctx := context.Background()
	locker := redislock.New(c.client())
	other := redislock.New(c.client())

	// B stalled (paused with a command in flight for > node_timeout).
	if err := b.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Obtain(ctx, "warm", time.Second, nil); err != nil {
		t.Fatalf("warm: %v", err)
	}
	time.Sleep(200 * time.Millisecond)

	// X obtains k: A at once, C after 60ms.
	if err := m2.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() { time.Sleep(60 * time.Millisecond); m2.Resume() }()
	x, err := locker.Obtain(ctx, "k", time.Second, nil)
	if err != nil {
		t.Fatalf("X obtain: %v", err)
	}
	b.Resume()
	t.Logf("X obtained at +%v (its own window: until +%v)", time.Since(start).Round(time.Millisecond), time.Second-quorum.Drift(time.Second, 0.01))

	// At +400ms, X asks redislock how long it still holds the lock, while C is slow (100ms).
	time.Sleep(time.Until(start.Add(400 * time.Millisecond)))
	if err := m2.Pause(); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(100 * time.Millisecond); m2.Resume() }()
	ttl, err := x.TTL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := time.Now()
	claimed := recv.Add(ttl)
	t.Logf("X.TTL() = %v at +%v: X holds k until +%v by lockproxy's answer", ttl, recv.Sub(start).Round(time.Millisecond), claimed.Sub(start).Round(time.Millisecond))
	for i, m := range c.masters {
		v, _ := m.Do("PTTL", "k")
		t.Logf("master %d PTTL k = %s", i, v)
	}

	for time.Now().Before(claimed) {
		y, err := other.Obtain(ctx, "k", time.Second, nil)
		if err == nil {
			at := time.Now()
			if at.Before(claimed) {
				t.Errorf("VIOLATION: Y obtained k at +%v; X's TTL() said X holds it until +%v (%v overlap)",
					at.Sub(start).Round(time.Millisecond), claimed.Sub(start).Round(time.Millisecond), claimed.Sub(at).Round(time.Millisecond))
			}
			_ = y
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Log("no second holder within X's TTL() window")
}
