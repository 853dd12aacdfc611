package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// TestBLPOPServesEveryElementOfOnePush: a release that pushes two
// elements in one LPUSH (a two-permit release; python-redis-lock's
// unlock with "1, 1") leaves two elements on the masters, and one Redis
// serves both blocked clients. The proxy hears one push event per
// signal key and wakes one waiter for it; a waiter that popped passes
// the wake-up on, so the second waiter pops the second element. Without
// the pass-on it timed out with an element on every master (review,
// helper-50).
func TestBLPOPServesEveryElementOfOnePush(t *testing.T) {
	a, b := twoProxies(t, "")
	ctx := context.Background()
	body := strings.Replace(pyUnlock(t), `redis.call("lpush", KEYS[2], 1)`, `redis.call("lpush", KEYS[2], 1, 1)`, 1)
	if body == pyUnlock(t) {
		t.Fatal("lpush line not found")
	}
	got := make(chan []string, 2)
	for i := 0; i < 2; i++ {
		cl := a.client()
		go func() {
			v, _ := cl.BLPop(ctx, 8*time.Second, "lock-signal:x").Result()
			got <- v
		}()
	}
	waitBlocked(t, a, 2)
	time.Sleep(300 * time.Millisecond)
	holder := b.client()
	if ok, _ := holder.SetNX(ctx, "lock:x", "h", 30*time.Second).Result(); !ok {
		t.Fatal("holder did not get the lock")
	}
	if n, err := holder.Eval(ctx, body, []string{"lock:x", "lock-signal:x"}, "h", 10000).Int(); err != nil || n != 0 {
		t.Fatalf("unlock: %v %v", n, err)
	}
	for i := 0; i < 2; i++ {
		select {
		case v := <-got:
			if len(v) != 2 {
				t.Fatalf("waiter %d: BLPOP returned %v (timed out) while the masters hold: %v", i+1, v, lens(t, a, "lock-signal:x"))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no answer")
		}
	}
}

func lens(t *testing.T, c *cluster, key string) []string {
	var out []string
	for _, m := range c.masters {
		v, err := m.Do("LLEN", key)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		out = append(out, v)
	}
	return out
}

// TestBLPOPElementPutBackForHungUpClient: a client that hangs up while its
// pop round is in flight would have popped nothing on Redis, but the
// masters popped the element for it. With no other waiter on that proxy
// the element was lost, and a waiter on another proxy slept through the
// release to its timeout (forever with python-redis-lock's timeout 0). It
// now goes back on every master, at the end it came from and with the
// list's TTL, and the push is announced: the waiter on the other proxy
// pops it.
func TestBLPOPElementPutBackForHungUpClient(t *testing.T) {
	a, b := twoProxies(t, "")
	// hangUpDuringRound blocks a client on a, gives the masters one
	// element, and hangs the client up while a's round for it is held
	// up by the paused masters (well inside node_timeout). It waits for
	// the round to be in flight (INFO): a sleep let the hang-up come
	// first on a busy machine, and then nothing was popped (review,
	// helper-51: 14 of 45 runs under load).
	hangUpDuringRound := func() {
		t.Helper()
		rc := a.respConn()
		rc.send("BLPOP", "sig", "0")
		waitBlocked(t, a, 1)
		for _, m := range a.masters {
			if _, err := m.Do("RPUSH", "sig", "e1"); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Do("PEXPIRE", "sig", "60000"); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range a.masters {
			if err := m.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		// Wakes a's client (and, once the masters answer, b's waiters,
		// whose rounds reach the masters after a's).
		if err := a.hub.Emit(pubsub.Event{Type: pubsub.EventPush, Key: "sig"}); err != nil {
			t.Fatal(err)
		}
		waitInfo(t, a, "blocked_pop_rounds:1\r\n") // a's round is at the paused masters
		rc.conn.Close()
		waitBlocked(t, a, 0)
		for _, m := range a.masters {
			if err := m.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// No waiter anywhere: the element is back on every master, with a TTL.
	hangUpDuringRound()
	deadline := time.Now().Add(5 * time.Second)
	for i, m := range a.masters {
		for {
			n, err := m.Do("LLEN", "sig")
			if err != nil {
				t.Fatal(err)
			}
			if n == "1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("master %d holds %s elements of sig, want the popped one back", i, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ttl, err := m.Do("PTTL", "sig"); err != nil || len(ttl) < 2 || ttl[0] == '-' {
			t.Fatalf("master %d: sig put back with PTTL %s (%v), want the list's TTL", i, ttl, err)
		}
	}
	for _, m := range a.masters {
		m.Do("DEL", "sig")
	}

	// A waiter on the other proxy: woken by the put-back's push.
	got := make(chan []string, 1)
	go func() {
		v, _ := b.client().BLPop(context.Background(), 8*time.Second, "sig").Result()
		got <- v
	}()
	waitBlocked(t, b, 1)
	hangUpDuringRound()
	select {
	case v := <-got:
		if len(v) != 2 || v[1] != "e1" {
			t.Fatalf("waiter on the other proxy: BLPOP returned %v, want [sig e1]; masters hold %v", v, lens(t, a, "sig"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	// Phase 1 put one element back for sure. In phase 2, a's round and
	// the round of b's waiter (woken by the same announcement once the
	// masters go on) race for the element: a's repush serves b's waiter
	// when a's round wins, and b's waiter pops it itself when it does not.
	// Either way the element reaches the waiter, which is what Redis
	// would do.
	info, _ := a.client().Info(context.Background(), "clients").Result()
	if !strings.Contains(info, "blocked_elements_repushed:1\r\n") && !strings.Contains(info, "blocked_elements_repushed:2\r\n") {
		t.Errorf("INFO clients of the proxy whose client hung up: %q, want blocked_elements_repushed 1 or 2", info)
	}
}

// waitInfo waits until INFO clients of c contains line.
func waitInfo(t testing.TB, c *cluster, line string) {
	t.Helper()
	cl := c.client()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := cl.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("INFO clients never had %q: %s", line, info)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
