package compat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// goRedis is a go-redis client of lockproxy as an application would make
// it: go-redis 9's defaults, so RESP3 (HELLO 3) and its CLIENT SETINFO and
// MAINT_NOTIFICATIONS handshake.
func (e *env) goRedis(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// shorten sets key's PTTL to ms on every master, as if time had passed, so
// that an extend that follows visibly moves it back up.
func (e *env) shorten(t *testing.T, key string, ms string) {
	t.Helper()
	for i := range e.masters {
		if v := e.do(t, i, "PEXPIRE", key, ms); v != "1" {
			t.Fatalf("PEXPIRE %s on master %d = %s", key, i, v)
		}
	}
}

// TestRedsync: go-redsync/redsync v4 with one go-redis pool pointed at
// lockproxy, so redsync's quorum is 1 and lockproxy's does the work.
func TestRedsync(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rs := redsync.New(goredis.NewPool(e.goRedis(t)))
	key := prefixOf(t) + "mutex"

	m1 := rs.NewMutex(key, redsync.WithExpiry(8*time.Second), redsync.WithTries(1))
	if err := m1.Lock(); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	must(t, e.checkHeld(t, key, m1.Value()))
	must(t, e.checkPTTL(t, key, 7000, 8000))

	// A second locker is refused while it is held.
	m2 := rs.NewMutex(key, redsync.WithExpiry(8*time.Second), redsync.WithTries(2), redsync.WithRetryDelay(10*time.Millisecond))
	var taken *redsync.ErrTaken
	if err := m2.Lock(); !errors.As(err, &taken) && !errors.Is(err, redsync.ErrFailed) {
		t.Fatalf("second Lock of a held mutex: %v, want ErrTaken or ErrFailed", err)
	}
	if err := m2.TryLock(); !errors.As(err, &taken) && !errors.Is(err, redsync.ErrFailed) {
		t.Fatalf("TryLock of a held mutex: %v, want ErrTaken or ErrFailed", err)
	}
	must(t, e.checkHeld(t, key, m1.Value()))

	// Valid reads the value back (GET, a quorum read through lockproxy).
	if ok, err := m1.Valid(); !ok || err != nil {
		t.Fatalf("holder Valid = %v, %v", ok, err)
	}
	if ok, _ := m2.Valid(); ok {
		t.Fatal("Valid is true for a mutex that does not hold the lock")
	}

	// Extend moves the TTL back to the expiry on a quorum of masters.
	e.shorten(t, key, "2000")
	before := time.Now()
	if ok, err := m1.Extend(); !ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	must(t, e.checkPTTL(t, key, 7000, 8000))
	if until := m1.Until(); until.Before(before.Add(7*time.Second)) || until.After(time.Now().Add(8*time.Second)) {
		t.Fatalf("Until after Extend = %v from now, want about 8s", time.Until(until))
	}

	// A stranger's value can neither unlock nor extend it.
	stranger := rs.NewMutex(key, redsync.WithValue("stranger"))
	if ok, err := stranger.Unlock(); ok {
		t.Fatalf("stranger Unlock = true, %v", err)
	}
	if ok, err := stranger.Extend(); ok {
		t.Fatalf("stranger Extend = true, %v", err)
	}
	must(t, e.checkHeld(t, key, m1.Value()))

	// Unlock; then the other locker gets it.
	if ok, err := m1.Unlock(); !ok || err != nil {
		t.Fatalf("Unlock = %v, %v", ok, err)
	}
	must(t, e.checkGone(t, key))
	if err := m2.Lock(); err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	must(t, e.checkHeld(t, key, m2.Value()))
	// The first holder's token is gone: unlocking again fails.
	if ok, _ := m1.Unlock(); ok {
		t.Fatal("Unlock of a lock now held by another succeeded")
	}
	must(t, e.checkHeld(t, key, m2.Value()))
	if ok, err := m2.Unlock(); !ok || err != nil {
		t.Fatalf("Unlock = %v, %v", ok, err)
	}

	// ErrLockAlreadyExpired: redsync 4.18's delete script answers -1 on a
	// missing key, and lockproxy passes the masters' -1 through.
	short := rs.NewMutex(key, redsync.WithExpiry(800*time.Millisecond), redsync.WithTries(1), redsync.WithTimeoutFactor(0.2))
	if err := short.Lock(); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	must(t, e.checkHeld(t, key, short.Value()))
	must(t, e.checkGone(t, key)) // expires by itself
	if ok, err := short.Unlock(); ok || !errors.Is(err, redsync.ErrLockAlreadyExpired) {
		t.Fatalf("Unlock of an expired lock = %v, %v; want false, ErrLockAlreadyExpired", ok, err)
	}
	if ok, _ := short.Extend(); ok {
		t.Fatal("Extend of an expired lock succeeded")
	}

	// WithSetNXOnExtend: Extend of an expired lock takes it again.
	renew := rs.NewMutex(key, redsync.WithExpiry(800*time.Millisecond), redsync.WithTries(1),
		redsync.WithTimeoutFactor(0.2), redsync.WithSetNXOnExtend())
	if err := renew.Lock(); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	must(t, e.checkGone(t, key))
	if ok, err := renew.Extend(); !ok || err != nil {
		t.Fatalf("Extend with SetNX of an expired lock = %v, %v", ok, err)
	}
	must(t, e.checkHeld(t, key, renew.Value()))
	if ok, err := renew.Unlock(); !ok || err != nil {
		t.Fatalf("Unlock = %v, %v", ok, err)
	}
	must(t, e.checkKeys(t, prefixOf(t)))
}

// TestBSMRedislock: bsm/redislock v0.9.4, which obtains through a Lua
// script (SET NX PX, or re-obtain by token prefix).
func TestBSMRedislock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	locker := redislock.New(e.goRedis(t))
	key := prefixOf(t) + "lock"

	l1, err := locker.Obtain(ctx, key, 5*time.Second, &redislock.Options{Metadata: "meta"})
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	if l1.Metadata() != "meta" {
		t.Fatalf("Metadata = %q", l1.Metadata())
	}
	value := l1.Token() + l1.Metadata()
	must(t, e.checkHeld(t, key, value))

	// Held: a second Obtain is ErrNotObtained, also with retries.
	if _, err := locker.Obtain(ctx, key, 5*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("second Obtain: %v, want ErrNotObtained", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = locker.Obtain(rctx, key, 5*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(50 * time.Millisecond)})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Obtain with retries of a held lock: %v", err)
	}
	must(t, e.checkHeld(t, key, value))

	// TTL: the conservative remaining validity of a quorum.
	if ttl, err := l1.TTL(ctx); err != nil || ttl < 4*time.Second || ttl > 5*time.Second {
		t.Fatalf("TTL = %v, %v; want in [4s, 5s]", ttl, err)
	}
	// Refresh moves the TTL on a quorum of masters.
	if err := l1.Refresh(ctx, 10*time.Second, nil); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	must(t, e.checkPTTL(t, key, 9000, 10000))
	if ttl, err := l1.TTL(ctx); err != nil || ttl < 9*time.Second || ttl > 10*time.Second {
		t.Fatalf("TTL after Refresh = %v, %v; want in [9s, 10s]", ttl, err)
	}

	// Re-obtain with the same token (Options.Token): bsm's obtain script
	// sets the value again when the held one starts with that token.
	e.shorten(t, key, "2000")
	l1b, err := locker.Obtain(ctx, key, 6*time.Second, &redislock.Options{Token: l1.Token(), Metadata: "meta2"})
	if err != nil {
		t.Fatalf("re-Obtain with own token: %v", err)
	}
	must(t, e.checkHeld(t, key, l1.Token()+"meta2"))
	must(t, e.checkPTTL(t, key, 5000, 6000))
	// Another token is still refused.
	if _, err := locker.Obtain(ctx, key, 5*time.Second, &redislock.Options{Token: "another"}); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Obtain with another token: %v, want ErrNotObtained", err)
	}
	must(t, e.checkHeld(t, key, l1.Token()+"meta2"))

	// Release; then the old lock object is not held any more.
	if err := l1b.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	must(t, e.checkGone(t, key))
	if err := l1.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("second Release: %v, want ErrLockNotHeld", err)
	}
	if ttl, err := l1.TTL(ctx); ttl != 0 || err != nil {
		t.Fatalf("TTL of a released lock = %v, %v; want 0", ttl, err)
	}

	// Expiry and takeover: the old holder can neither refresh nor release
	// the new holder's lock.
	short, err := locker.Obtain(ctx, key, 300*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	must(t, e.checkGone(t, key))
	l2, err := locker.Obtain(ctx, key, 5*time.Second, nil)
	if err != nil {
		t.Fatalf("Obtain after expiry: %v", err)
	}
	if err := short.Refresh(ctx, time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Refresh of an expired lock: %v, want ErrNotObtained", err)
	}
	if err := short.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("Release of an expired lock: %v, want ErrLockNotHeld", err)
	}
	must(t, e.checkHeld(t, key, l2.Token()))
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	must(t, e.checkKeys(t, prefixOf(t)))
}
