package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// Double grants through the tokenless PEXPIRE (review, helper-52).

func twoProxiesTimeout(t *testing.T, n int, nodeTimeout time.Duration) (masters []*redisproc.Server, p1, p2 *cluster) {
	t.Helper()
	masters = redisproc.ForTest(t, n)
	opt := func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = nodeTimeout }
	p1 = startFront(t, masters, false, opt)
	p2 = startFront(t, masters, false, opt)
	for _, p := range []*cluster{p1, p2} {
		p.waitUp(n)
		p.waitVoting(n)
	}
	return masters, p1, p2
}

// TestPexpireCountsOnlyCopiesOfOneValue: PEXPIRE (the legacy extend) counts
// as a yes every master where the key exists, whatever its value. A holds k
// on masters 0 and 1 only (master 2 was stalled for A's proxy P1). B's
// failed SET NX through P2 writes tokB on master 2; before B's undo
// deletes it, A's PEXPIRE counts it: master 0 (tokA) + master 2 (tokB) = Q.
// Master 1 is paused meanwhile and A's copy there expires. After the undo,
// only master 0 holds k, and C is granted k while A believes it holds it
// for 30s. Now a yes carries a digest of the value extended, and only Q
// equal ones are a quorum: A's PEXPIRE answers 0.
func TestPexpireCountsOnlyCopiesOfOneValue(t *testing.T) {
	const nt = 100 * time.Millisecond
	masters, p1, p2 := twoProxiesTimeout(t, 3, nt)
	ctx := context.Background()
	a, b, c := p1.client(), p2.client(), p2.client()
	paused := map[int]bool{}
	pause := func(i int) {
		if err := masters[i].Pause(); err != nil {
			t.Fatal(err)
		}
		paused[i] = true
	}
	resume := func(i int) {
		if err := masters[i].Resume(); err != nil {
			t.Fatal(err)
		}
		paused[i] = false
	}
	defer func() {
		for i, p := range paused {
			if p {
				masters[i].Resume()
			}
		}
	}()

	// 1. Master 2 paused; P1 leaves a command unanswered there past
	// node_timeout, so P1 stops sending acquisitions to it.
	pause(2)
	if ok, err := a.SetNX(ctx, "warm", "x", time.Minute).Result(); err != nil || !ok {
		t.Fatalf("warm-up SET NX: %v %v", ok, err)
	}
	time.Sleep(2 * nt)

	// 2. A takes k through P1: masters 0 and 1 (2 is not asked).
	tA := time.Now()
	if ok, err := a.SetNX(ctx, "k", "tokA", 1500*time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("A's SET NX: %v %v", ok, err)
	}
	// 3. Master 1 paused too. B's SET NX through P2: master 0 says nil,
	// 1 and 2 are queued (P2 has no stall on them).
	pause(1)
	bDone := make(chan error, 1)
	go func() {
		ok, err := b.SetNX(ctx, "k", "tokB", 30*time.Second).Result()
		if err == nil && ok {
			err = errGranted
		}
		bDone <- err
	}()
	time.Sleep(10 * time.Millisecond)
	// 4. A renews with PEXPIRE through P1 (still within its validity).
	aDone := make(chan int64, 1)
	go func() {
		v, err := a.PExpire(ctx, "k", 30*time.Second).Result()
		if err != nil {
			t.Logf("A's PEXPIRE: %v", err)
		}
		if v {
			aDone <- 1
		} else {
			aDone <- 0
		}
	}()
	time.Sleep(10 * time.Millisecond)
	resume(2) // B's SET writes tokB on 2; A's PEXPIRE finds k there
	tExt := time.Now()
	ext := <-aDone
	t.Logf("A's PEXPIRE answered %d, %v after A's SET", ext, time.Since(tA))
	t.Logf("B's SET NX: %v", <-bDone)
	if ext != 1 {
		// Masters 0 and 2 extended different values (tokA, tokB): not a
		// quorum of one lock, so A hears 0 and knows it lost k.
		return
	}
	// 5. A's first copy on master 1 expires while it is paused.
	time.Sleep(time.Until(tA.Add(1600 * time.Millisecond)))
	resume(1)
	waitFor(t, func() bool {
		for _, p := range []*cluster{p1, p2} {
			for _, m := range p.engine.Masters() {
				if m.Queued+m.Inflight > 0 {
					return false
				}
			}
		}
		return true
	}, "queues drained")
	t.Logf("k on the masters: %v", p1.onMasters("k"))
	// 6. C asks for k. A believes it holds k until tExt+30s-drift.
	ok, err := c.SetNX(ctx, "k", "tokC", 10*time.Second).Result()
	if err == nil && ok && time.Now().Before(tExt.Add(29*time.Second)) {
		t.Fatalf("DOUBLE GRANT: C got k while A's PEXPIRE (answered 1 %v ago) makes A the holder for 30s; masters: %v",
			time.Since(tExt), p1.onMasters("k"))
	}
	t.Logf("C's SET NX: ok=%v err=%v", ok, err)
}

// TestPexpireIgnoresAnotherTokensLeftover: one proxy. A minority
// leftover of B (tokB on master 2, as a failed attempt whose undo was left
// unconfirmed — a killed proxy, a broken master connection — leaves it; the
// README calls it safe) is counted by A's PEXPIRE while master 1 is paused;
// B's library then releases its own token (redsync's delete script, as it
// does after a failed acquisition), A's first copy on master 1 expires, and
// C is granted k while A believes it holds it for 30s. Now A's PEXPIRE
// answers 0: tokA on master 0 and tokB on master 2 are not one lock.
func TestPexpireIgnoresAnotherTokensLeftover(t *testing.T) {
	const nt = 100 * time.Millisecond
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = nt })
	ctx := context.Background()
	a, b, cc := c.client(), c.client(), c.client()
	// A's lock on masters 0 and 1, B's leftover on 2.
	tA := time.Now()
	c.holdOn("k", "tokA", 1500*time.Millisecond, 0, 1)
	c.holdOn("k", "tokB", 20*time.Second, 2)
	if err := c.masters[1].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.masters[1].Resume()
		}
	}()
	ext, err := a.PExpire(ctx, "k", 30*time.Second).Result()
	tExt := time.Now()
	t.Logf("A's PEXPIRE: %v %v", ext, err)
	if !ext {
		return // tokA and tokB are not one lock's copies: A hears 0
	}
	const del = `
	local val = redis.call("GET", KEYS[1])
	if val == ARGV[1] then
		return redis.call("DEL", KEYS[1])
	elseif val == false then
		return -1
	else
		return 0
	end
`
	r, err := b.Eval(ctx, del, []string{"k"}, "tokB").Result()
	t.Logf("B's release of its own token: %v %v", r, err)
	time.Sleep(time.Until(tA.Add(1600 * time.Millisecond)))
	if err := c.masters[1].Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitFor(t, func() bool {
		for _, m := range c.engine.Masters() {
			if m.Queued+m.Inflight > 0 {
				return false
			}
		}
		return true
	}, "queues drained")
	ok, err := cc.SetNX(ctx, "k", "tokC", 10*time.Second).Result()
	if err == nil && ok && time.Now().Before(tExt.Add(29*time.Second)) {
		t.Fatalf("DOUBLE GRANT: C got k %v after A's PEXPIRE answered 1 (30s); masters: %v", time.Since(tExt), c.onMasters("k"))
	}
	t.Logf("C: %v %v", ok, err)
}

type grantedErr struct{}

func (grantedErr) Error() string { return "granted" }

var errGranted error = grantedErr{}

// TestPexpireEqualHashesInAnotherOrder: masters holding one and the same
// hash, its fields written in another order on each (two clients' HSETs
// crossing), are copies of one value: PEXPIRE extends it. A digest of DUMP
// differed with the order, and PEXPIRE answered 0 (review, helper-54).
func TestPexpireEqualHashesInAnotherOrder(t *testing.T) {
	c := startCluster(t, 3)
	orders := [][]string{{"a", "1", "b", "2"}, {"b", "2", "a", "1"}, {"a", "1", "b", "2"}}
	for i, m := range c.masters {
		if _, err := m.Do(append([]string{"HSET", "h"}, orders[i]...)...); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Do("PEXPIRE", "h", "10000"); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := c.client().PExpire(context.Background(), "h", 30*time.Second).Result(); err != nil || !ok {
		t.Fatalf("PEXPIRE of one hash on every master = %v, %v; want 1", ok, err)
	}
}
