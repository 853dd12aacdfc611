package compat

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// newRueidisLocker is rueidislock pointed at lockproxy. lockproxy has no
// client-side caching (CLIENT TRACKING never reaches a master), so:
//   - DisableCache: true, which also makes rueidislock poll every
//     TryNextAfter instead of waiting for invalidations;
//   - ForceSingleClient: true, so rueidis does not probe CLUSTER SLOTS (it
//     would fall back on lockproxy's unknown-command error too, but this
//     says what lockproxy is: one standalone server).
//   - TryNextAfter: 200ms. rueidislock gives each key's acquisition this
//     long (default 20ms) and, when it times out, deletes that key again
//     and counts it as failed. A quorum decision may take up to lockproxy's
//     node_timeout (50ms) when a master is slow, so 20ms makes locks fail
//     under load that a single Redis would grant.
//
// KeyMajority stays at its default (2 of 3 keys): each of rueidislock's
// keys is a quorum lock of its own through lockproxy.
func newRueidisLocker(t *testing.T, addr, prefix string, validity time.Duration, setpx bool) rueidislock.Locker {
	t.Helper()
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{
			InitAddress:       []string{addr},
			DisableCache:      true,
			ForceSingleClient: true,
		},
		KeyPrefix:     prefix,
		KeyValidity:   validity,
		TryNextAfter:  200 * time.Millisecond,
		FallbackSETPX: setpx,
	})
	if err != nil {
		t.Fatalf("rueidislock.NewLocker: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

// TestRueidisLock: rueidislock (rueidis v1.0.x), PXAT and PX flavours.
func TestRueidisLock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, setpx := range []bool{false, true} {
		t.Run("FallbackSETPX="+strconv.FormatBool(setpx), func(t *testing.T) {
			testRueidisLock(t, e, setpx)
		})
	}
}

func testRueidisLock(t *testing.T, e *env, setpx bool) {
	ctx := context.Background()
	prefix := prefixOf(t) + "rl"
	keys := []string{prefix + ":0:res", prefix + ":1:res", prefix + ":2:res"}
	const validity = time.Second
	l1 := newRueidisLocker(t, e.addr, prefix, validity, setpx)
	l2 := newRueidisLocker(t, e.addr, prefix, validity, setpx)

	ctx1, cancel1, err := l1.TryWithContext(ctx, "res")
	if err != nil {
		t.Fatalf("TryWithContext: %v", err)
	}
	// rueidislock returns once it holds 2 of its 3 keys and takes the
	// third in the background: all three end up on every master.
	must(t, e.checkKeys(t, prefix, keys...))
	token := e.values(t, keys[0])[0]
	for _, k := range keys {
		must(t, e.checkHeld(t, k, token))
	}

	// Held: a second locker is refused.
	if _, _, err := l2.TryWithContext(ctx, "res"); !errors.Is(err, rueidislock.ErrNotLocked) {
		t.Fatalf("second TryWithContext: %v, want ErrNotLocked", err)
	}
	must(t, e.checkHeld(t, keys[0], token))

	// rueidislock extends every validity/2 with PEXPIREAT now+validity:
	// the keys outlive their first expiry and their PTTL moves up on a
	// quorum.
	// Wait until the TTL has run down past half, then until it is back
	// up on a quorum.
	if !poll(func() bool { return e.pttls(t, keys[0])[0] < 700 }) {
		t.Fatalf("PTTL of %s never ran down: %v", keys[0], e.pttls(t, keys[0]))
	}
	if !poll(func() bool { return count(e.pttls(t, keys[0]), func(v int64) bool { return v > 800 }) >= q }) {
		t.Fatalf("PTTL of %s never moved back up: %v", keys[0], e.pttls(t, keys[0]))
	}
	time.Sleep(validity) // past the first expiry, on purpose
	if ctx1.Err() != nil {
		t.Fatalf("lock lost while extended: %v", context.Cause(ctx1))
	}
	must(t, e.checkHeld(t, keys[0], token))

	// Release (cancel): every key deleted on every master; the other
	// locker, waiting in WithContext, gets it.
	type got struct {
		ctx    context.Context
		cancel context.CancelFunc
		err    error
	}
	waiting := make(chan got, 1)
	// The wait is bounded by a timer, not a deadline on the context: the
	// lock's context derives from it, and its end would release the lock.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	timer := time.AfterFunc(5*time.Second, wcancel)
	go func() {
		c, cc, err := l2.WithContext(wctx, "res")
		timer.Stop()
		waiting <- got{c, cc, err}
	}()
	cancel1()
	w := <-waiting
	if w.err != nil {
		t.Fatalf("WithContext after release: %v", w.err)
	}
	token2 := holderOf(t, e, keys)
	if token2 == "" || token2 == token {
		t.Fatalf("after the second locker got it, %s hold %q (first locker's: %q)", keys, token2, token)
	}

	// ForceWithContext takes it over; the old holder finds out at its next
	// extend (no invalidations without client-side caching) and its
	// context ends.
	ctx3, cancel3, err := l1.ForceWithContext(ctx, "res")
	if err != nil {
		t.Fatalf("ForceWithContext: %v", err)
	}
	select {
	case <-w.ctx.Done():
	case <-time.After(3 * validity):
		t.Fatal("the overtaken holder's context is still live")
	}
	w.cancel()
	if ctx3.Err() != nil {
		t.Fatalf("forced lock lost: %v", ctx3.Err())
	}
	token3 := holderOf(t, e, keys)
	if token3 == "" || token3 == token2 {
		t.Fatalf("after force %s hold %q (overtaken holder's: %q)", keys, token3, token2)
	}
	cancel3()
	must(t, e.checkKeys(t, prefix))
}

// TestRueidisCacheRefused: rueidis with client-side caching on (its
// default) cannot connect, since lockproxy refuses CLIENT TRACKING; the
// error says to set DisableCache.
func TestRueidisCacheRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{e.addr}, ForceSingleClient: true},
	})
	if err == nil {
		l.Close()
		t.Fatal("rueidislock with client-side caching connected to lockproxy; want an error")
	}
	if !strings.Contains(err.Error(), "DisableCache: true") || !strings.Contains(err.Error(), "CLIENT TRACKING is not supported") {
		t.Fatalf("error does not say how to fix it: %v", err)
	}
}

// holderOf returns the token that holds a majority (2 of 3) of
// rueidislock's keys, each on every master, or "" when none does.
func holderOf(t *testing.T, e *env, keys []string) string {
	t.Helper()
	held := map[string]int{}
	for _, k := range keys {
		v := e.values(t, k)[0]
		if v != "(nil)" && e.checkHeld(t, k, v) == nil {
			held[v]++
		}
	}
	for v, n := range held {
		if n >= 2 {
			return v
		}
	}
	return ""
}
