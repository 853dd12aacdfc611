package compat

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
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

// ctxLocker is what rueidislock.Locker and valkeylock.Locker (its fork in
// valkey-go) have in common: the same three ways to take a lock.
type ctxLocker interface {
	WithContext(ctx context.Context, name string) (context.Context, context.CancelFunc, error)
	TryWithContext(ctx context.Context, name string) (context.Context, context.CancelFunc, error)
	ForceWithContext(ctx context.Context, name string) (context.Context, context.CancelFunc, error)
}

// newCtxLocker makes a locker of one library for addr, with rueidislock's
// LockerOption fields (newRueidisLocker says why each is set).
type newCtxLocker func(t *testing.T, addr, prefix string, validity time.Duration, setpx bool) ctxLocker

// TestRueidisLock: rueidislock (rueidis v1.0.x), PXAT and PX flavours.
func TestRueidisLock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	newLocker := func(t *testing.T, addr, prefix string, validity time.Duration, setpx bool) ctxLocker {
		return newRueidisLocker(t, addr, prefix, validity, setpx)
	}
	for _, setpx := range []bool{false, true} {
		t.Run("FallbackSETPX="+strconv.FormatBool(setpx), func(t *testing.T) {
			testRueidisLock(t, e, newLocker, setpx, rueidislock.ErrNotLocked)
		})
	}
}

// testRueidisLock drives a rueidislock-style locker made by newLocker
// against e; notLocked is the library's "held by another" error.
func testRueidisLock(t *testing.T, e *env, newLocker newCtxLocker, setpx bool, notLocked error) {
	ctx := context.Background()
	prefix := prefixOf(t) + "rl"
	keys := []string{prefix + ":0:res", prefix + ":1:res", prefix + ":2:res"}
	// PXAT: 5 s, rueidislock's default. lockproxy counts a master's copy of
	// an absolute deadline only if it outlasts the TTL less the drift
	// allowance from the command's arrival; 1 s leaves 12 ms, less than a
	// master under -race can take to run it (refused, then the test fails).
	validity := time.Second
	if !setpx {
		validity = 5 * time.Second
	}
	l1 := newLocker(t, e.addr, prefix, validity, setpx)
	l2 := newLocker(t, e.addr, prefix, validity, setpx)

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
	if _, _, err := l2.TryWithContext(ctx, "res"); !errors.Is(err, notLocked) {
		t.Fatalf("second TryWithContext: %v, want ErrNotLocked", err)
	}
	must(t, e.checkHeld(t, keys[0], token))

	// rueidislock extends every validity/2 with PEXPIREAT now+validity:
	// the keys outlive their first expiry and their PTTL moves up on a
	// quorum.
	// Wait until the TTL has run down past half, then until it is back
	// up on a quorum.
	if !poll(func() bool { return e.pttls(t, keys[0])[0] < validity.Milliseconds()*7/10 }) {
		t.Fatalf("PTTL of %s never ran down: %v", keys[0], e.pttls(t, keys[0]))
	}
	if !poll(func() bool {
		return count(e.pttls(t, keys[0]), func(v int64) bool { return v > validity.Milliseconds()*8/10 }) >= e.quorum
	}) {
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

// TestRueidisCacheRefused: rueidislock with client-side caching on asks
// for CLIENT TRACKING in OPTOUT mode (it waits for invalidations, which
// lockproxy does not send) and cannot connect; the error says to set
// DisableCache.
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
	if !strings.Contains(err.Error(), "DisableCache: true") || !strings.Contains(err.Error(), "CLIENT TRACKING is supported in OPTIN mode only") {
		t.Fatalf("error does not say how to fix it: %v", err)
	}
}

// TestRueidisDefaultOptions: a rueidis client with its default options
// (client-side caching on, CLIENT TRACKING ON OPTIN at connect) works
// through lockproxy for everything it does not read through the cache:
// SET NX, and redsync over rueidis (lock, extend, unlock). A DoCache read
// fails (lockproxy refuses CLIENT CACHING YES, so nothing is ever
// tracked) and leaves the connection working. Before, rueidis with its
// defaults could not connect at all.
func TestRueidisDefaultOptions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addr}, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("rueidis with default options: %v", err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	key := prefixOf(t) + "plain"
	if err := c.Do(ctx, c.B().Set().Key(key).Value("t1").Nx().Px(8*time.Second).Build()).Error(); err != nil {
		t.Fatalf("SET NX: %v", err)
	}
	must(t, e.checkHeld(t, key, "t1"))
	if err := c.Do(ctx, c.B().Set().Key(key).Value("t2").Nx().Px(8*time.Second).Build()).Error(); !rueidis.IsRedisNil(err) {
		t.Fatalf("second SET NX of a held key: %v, want nil", err)
	}
	if _, err := c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Minute).ToString(); err == nil {
		t.Fatal("DoCache GET through lockproxy succeeded; want an error (nothing can be tracked)")
	}
	if v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString(); err != nil || v != "t1" {
		t.Fatalf("GET after a failed DoCache = %q, %v; want t1", v, err)
	}

	rs := redsync.New(rsrueidis.NewPool(rueidiscompat.NewAdapter(c)))
	m := rs.NewMutex(prefixOf(t)+"mutex", redsync.WithExpiry(8*time.Second), redsync.WithTries(1))
	if err := m.Lock(); err != nil {
		t.Fatalf("redsync over rueidis, Lock: %v", err)
	}
	must(t, e.checkHeld(t, prefixOf(t)+"mutex", m.Value()))
	if ok, err := m.Extend(); !ok || err != nil {
		t.Fatalf("Extend: %v %v", ok, err)
	}
	if ok, err := m.Unlock(); !ok || err != nil {
		t.Fatalf("Unlock: %v %v", ok, err)
	}
	// The unlock answers once a quorum released; the others follow.
	var v []string
	poll(func() bool {
		v = e.values(t, prefixOf(t)+"mutex")
		for _, x := range v {
			if x != "(nil)" {
				return false
			}
		}
		return true
	})
	for _, x := range v {
		if x != "(nil)" {
			t.Fatalf("after Unlock the masters hold %v", v)
		}
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
