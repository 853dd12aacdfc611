package proxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// TestStaleUndoSparesARetryThroughAnotherProxy: two lockproxies share 3
// masters behind a load balancer; P1's link to the masters turns slow
// (its writes take 1s to arrive: a congested path, or P1 itself stalled
// for as long). A client tries to take k for 300ms through P1 and gets
// NOQUORUM; it retries with the same token, as redsync does after any
// error (and redis-py's Lock after a refusal; Redisson's token is its
// thread's for good), through P2 once the first attempt's copies have
// expired, and is granted k for 5s. P1's undo of the first attempt, sent
// when the masters' late replies reached it, arrives after the retry:
// unguarded, it deleted the granted copies on every master and a
// stranger was granted k inside the retry's validity. An undo sent that
// long after its acquisition (more than half its TTL, or past TTL minus
// node_timeout) is left out: the copy it meant to delete may have
// expired and been written again.
func TestStaleUndoSparesARetryThroughAnotherProxy(t *testing.T) {
	try := corpusScript(t, "redisson-4.x_tryLockInner")
	flows := []struct {
		name    string
		acquire func(cl *redis.Client, tok string, ttl time.Duration) (bool, error)
		holds   func(c *cluster, i int, tok string) bool
	}{
		{"set-nx", func(cl *redis.Client, tok string, ttl time.Duration) (bool, error) {
			return cl.SetNX(context.Background(), "k", tok, ttl).Result()
		}, func(c *cluster, i int, tok string) bool {
			v, _ := c.masters[i].Do("GET", "k")
			return v == tok
		}},
		{"redisson", func(cl *redis.Client, tok string, ttl time.Duration) (bool, error) {
			_, err := try.Run(context.Background(), cl, []string{"k"}, ttl.Milliseconds(), tok).Result()
			if errors.Is(err, redis.Nil) {
				return true, nil
			}
			return false, err
		}, func(c *cluster, i int, tok string) bool {
			v, _ := c.masters[i].Do("HEXISTS", "k", tok)
			return v == "1"
		}},
	}
	for _, f := range flows {
		t.Run(f.name, func(t *testing.T) {
			staleUndo(t, f.acquire, f.holds)
		})
	}
}

func staleUndo(t *testing.T, acquire func(cl *redis.Client, tok string, ttl time.Duration) (bool, error), holds func(c *cluster, i int, tok string) bool) {
	p1, p2, _, links := delayedPair(t, 0)
	a1, a2, c := p1.client(), p2.client(), p2.client()
	on := func(tok string) int {
		n := 0
		for i := range p2.masters {
			if holds(p2, i, tok) {
				n++
			}
		}
		return n
	}

	for _, l := range links {
		l.setDelay(time.Second)
	}
	_, err := acquire(a1, "tokT", 300*time.Millisecond)
	if err == nil {
		t.Fatalf("first attempt through P1 (writes delayed 1s, node_timeout 250ms) answered without error; want NOQUORUM")
	}
	t.Logf("first attempt through P1: %v", err)
	// The first attempt lands on every master about 1s after it was sent
	// (P1's undo is written when the replies come, and is 1s on its way
	// too), and its copies expire 300ms later.
	seen := make([]bool, len(p2.masters))
	waitFor(t, func() bool {
		all := true
		for i := range seen {
			seen[i] = seen[i] || holds(p2, i, "tokT")
			all = all && seen[i]
		}
		return all
	}, "the first attempt's copies on every master")
	waitFor(t, func() bool { return on("tokT") == 0 }, "the first attempt's copies expired")

	ok, err := acquire(a2, "tokT", 5*time.Second)
	tGrant := time.Now()
	if err != nil || !ok {
		t.Fatalf("the retry through P2 with the same token: %v %v, want granted (k is free)", ok, err)
	}
	until := tGrant.Add(5*time.Second - quorum.Drift(5*time.Second, 0.01))
	waitFor(t, func() bool {
		for _, m := range p1.engine.Masters() {
			if m.Queued+m.Inflight > 0 {
				return false
			}
		}
		return true
	}, "P1's queues drained (its undos answered, if sent)")
	got := on("tokT")
	ok, err = acquire(c, "tokC", 5*time.Second)
	if ok && time.Now().Before(until) {
		t.Fatalf("DOUBLE GRANT: a stranger got k %v before the end of the retry's validity; the retry's token was left on %d masters after P1's late undo",
			time.Until(until).Round(time.Millisecond), got)
	}
	if err != nil {
		t.Fatalf("stranger's acquire: %v", err)
	}
	if got != 3 {
		t.Fatalf("the retry's token on %d masters after P1's traffic, want 3", got)
	}
}

// TestStaleUndoFromAPausedProxy: the same with P1, a lockproxy binary,
// paused (SIGSTOP: a GC or VM pause) while the masters' replies to the
// first attempt reach it. The masters are paused when the client's
// `SET k T NX PX 300` goes through P1, which answers NOQUORUM and is then
// paused itself; the masters resume and write T, which expires; the
// client's retry with T through P2 is granted for 5s; P1 resumes, reads
// the late OKs and, unguarded, deleted the retry's copies, and a stranger
// was granted k inside the retry's validity.
func TestStaleUndoFromAPausedProxy(t *testing.T) {
	ms := redisproc.ForTest(t, 3)
	settings := proxySettings{maxTTL: 10 * time.Second}
	p1 := startBinProxy(t, buildLockproxy(t), ms, settings)
	p1.waitVoting(3)
	p2 := startFront(t, ms, false, settings.opt())
	p2.waitVoting(3)
	ctx := context.Background()
	a1 := redis.NewClient(&redis.Options{Addr: p1.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { a1.Close() })
	a2, c := p2.client(), p2.client()

	resumeAll := func() {
		for _, m := range ms {
			m.Resume()
		}
	}
	for _, m := range ms {
		if err := m.Pause(); err != nil {
			resumeAll()
			t.Fatal(err)
		}
	}
	_, err := a1.SetNX(ctx, "k", "tokT", 300*time.Millisecond).Result()
	if err == nil {
		resumeAll()
		t.Fatal("first attempt through P1 with every master paused answered without error; want NOQUORUM")
	}
	t.Logf("first attempt through P1: %v", err)
	if err := p1.Pause(); err != nil {
		resumeAll()
		t.Fatal(err)
	}
	defer p1.Resume()
	resumeAll()
	holds := func(i int) bool { v, _ := ms[i].Do("GET", "k"); return v == "tokT" }
	seen := make([]bool, len(ms))
	n := 0
	waitFor(t, func() bool {
		n = 0
		for i := range seen {
			seen[i] = seen[i] || holds(i)
			if seen[i] {
				n++
			}
		}
		return n == len(ms)
	}, "the first attempt's copies on every master (written when they resumed)")
	waitFor(t, func() bool { return count(p2.onMasters("k"), "(nil)") == len(ms) }, "the first attempt's copies expired")

	ok, err := a2.SetNX(ctx, "k", "tokT", 5*time.Second).Result()
	tGrant := time.Now()
	if err != nil || !ok {
		t.Fatalf("the retry through P2 with the same token: %v %v, want granted (k is free)", ok, err)
	}
	until := tGrant.Add(5*time.Second - quorum.Drift(5*time.Second, 0.01))
	if err := p1.Resume(); err != nil {
		t.Fatal(err)
	}
	// Two reads through P1, one after the other: the second goes to every
	// master behind whatever P1 sent on reading the late replies, which
	// came before the first read's replies on each connection.
	for range 2 {
		if _, err := a1.Exists(ctx, "other").Result(); err != nil {
			t.Fatalf("read through P1 after its pause: %v", err)
		}
	}
	got := p2.onMasters("k")
	ok, err = c.SetNX(ctx, "k", "tokC", 5*time.Second).Result()
	if ok && time.Now().Before(until) {
		t.Fatalf("DOUBLE GRANT: a stranger got k %v before the end of the retry's validity; the masters held %v after P1's pause",
			time.Until(until).Round(time.Millisecond), got)
	}
	if err != nil {
		t.Fatalf("stranger's SET NX: %v", err)
	}
	if count(got, "tokT") != len(ms) {
		t.Fatalf("the retry's copies after P1's pause: %v, want tokT on every master", got)
	}
}
