package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"
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
