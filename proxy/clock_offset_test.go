package proxy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// clockShim is an LD_PRELOAD library that moves a process's wall clock
// (gettimeofday, clock_gettime(CLOCK_REALTIME*), time) by
// LOCKPROXY_TEST_CLOCK_OFFSET_MS: a master whose clock is set apart from
// lockproxy's. The monotonic clock is left alone, so the clocks' rates are
// equal: only their offset differs.
const clockShim = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static long long off_us = -1;
static void init(void) {
  if (off_us < 0) { const char *s = getenv("LOCKPROXY_TEST_CLOCK_OFFSET_MS"); off_us = s ? atoll(s) * 1000 : 0; }
}
int gettimeofday(struct timeval *tv, void *tz) {
  static int (*real)(struct timeval *, void *);
  if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
  int r = real(tv, tz);
  init();
  if (r == 0 && tv) { long long u = tv->tv_sec * 1000000LL + tv->tv_usec + off_us; tv->tv_sec = u / 1000000; tv->tv_usec = u % 1000000; }
  return r;
}
int clock_gettime(clockid_t c, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
  int r = real(c, ts);
  if (r == 0 && ts && (c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE)) {
    init();
    long long n = ts->tv_sec * 1000000000LL + ts->tv_nsec + off_us * 1000;
    ts->tv_sec = n / 1000000000; ts->tv_nsec = n % 1000000000;
  }
  return r;
}
time_t time(time_t *t) {
  struct timeval tv; gettimeofday(&tv, NULL);
  if (t) *t = tv.tv_sec;
  return tv.tv_sec;
}
`

// mastersAhead starts n masters whose wall clocks run ahead of this
// process's (and so of lockproxy's) by ahead, at the same rate.
func mastersAhead(t *testing.T, n int, ahead time.Duration) []*redisproc.Server {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc to build the clock shim")
	}
	dir := t.TempDir()
	src, so := filepath.Join(dir, "shim.c"), filepath.Join(dir, "shim.so")
	if err := os.WriteFile(src, []byte(clockShim), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-o", so, src, "-ldl").CombinedOutput(); err != nil {
		t.Skipf("cannot build the clock shim: %v\n%s", err, out)
	}
	t.Setenv("LD_PRELOAD", so)
	t.Setenv("LOCKPROXY_TEST_CLOCK_OFFSET_MS", strconv.FormatInt(ahead.Milliseconds(), 10))
	masters := redisproc.ForTest(t, n)
	os.Unsetenv("LD_PRELOAD") // restored by t.Setenv's cleanup
	for i, m := range masters {
		v, err := m.Do("TIME")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(strings.Trim(v, "[]"))
		sec, _ := strconv.ParseInt(f[0], 10, 64)
		us, _ := strconv.ParseInt(f[1], 10, 64)
		got := time.Unix(sec, us*1000).Sub(time.Now())
		if got < ahead-200*time.Millisecond || got > ahead+200*time.Millisecond {
			t.Skipf("clock shim not effective on master %d: its clock is %v from ours", i, got)
		}
	}
	return masters
}

// TestAbsoluteExpiryWithMasterClockAhead: a lock whose expiry is an
// absolute unix time (rueidislock's acquire with SET NX PXAT and its
// extend with PEXPIREAT, both catalogued) is forwarded to the masters as
// that absolute time, while lockproxy accounts its validity as PXAT minus
// its own wall clock. A master whose clock is ahead of lockproxy's by more
// than the drift allowance expires the lock that much before that
// validity; a quorum of such masters gave the lock to B inside A's
// validity (review, helper-66). Now a master's yes counts only where its
// copy's PTTL outlasts the TTL less drift, as for relative TTLs: with the
// masters 1.5 s ahead A is refused (and B never granted inside a validity
// A was told it has); with them ahead by less than the drift allowance, A
// is granted as before (the positive control: the check does not refuse
// honest clocks).
func TestAbsoluteExpiryWithMasterClockAhead(t *testing.T) {
	for _, v := range []string{"acqat", "extend"} {
		t.Run(v+"/ahead", func(t *testing.T) { absoluteExpiryAhead(t, v, 1500*time.Millisecond, false) })
		t.Run(v+"/within-drift", func(t *testing.T) { absoluteExpiryAhead(t, v, 10*time.Millisecond, true) })
	}
}

func absoluteExpiryAhead(t *testing.T, v string, ahead time.Duration, wantGrant bool) {
	masters := mastersAhead(t, 3, ahead)
	p := startFront(t, masters, false)
	p.waitUp(3)
	p.waitVoting(3)
	ctx := context.Background()
	read := func(name string) *redis.Script {
		b, err := os.ReadFile("catalog/scripts/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return redis.NewScript(string(b))
	}
	a, b := p.client(), p.client()
	const ttl = 2 * time.Second
	var pxat time.Time
	granted := false
	switch v {
	case "acqat":
		// rueidislock's acquire: SET k tok NX PXAT <now+ttl>, its clock
		// (the same as lockproxy's here).
		pxat = time.Now().Add(ttl)
		r, err := read("rueidislock_acqat").Run(ctx, a, []string{"k"}, "tokA", pxat.UnixMilli()).Result()
		switch {
		case err == nil && r == "OK":
			granted = true
		case err != redis.Nil:
			t.Fatalf("A acqat: %v %v, want OK or nil", r, err)
		}
	case "extend":
		// Taken with a relative TTL, then extended to an absolute deadline
		// with rueidislock's extend (PEXPIREAT), as its keep-alive does.
		if ok, err := a.SetNX(ctx, "k", "tokA", time.Second).Result(); err != nil || !ok {
			t.Fatalf("A SET NX: %v %v", ok, err)
		}
		pxat = time.Now().Add(ttl)
		r, err := read("rueidislock_extend").Run(ctx, a, []string{"k"}, "tokA", pxat.UnixMilli()).Result()
		switch {
		case err == nil && r == int64(1):
			granted = true
		case err != nil || r != int64(0):
			t.Fatalf("A extend: %v %v, want 1 or 0", r, err)
		}
	}
	if granted != wantGrant {
		t.Fatalf("A granted = %v with the masters' clocks %v ahead of lockproxy's, want %v (masters' PTTLs %v)", granted, ahead, wantGrant, p.pttls("k"))
	}
	if !granted {
		return
	}
	// lockproxy accounted the grant's validity from PXAT on its own clock.
	untilA := pxat.Add(-quorum.Drift(ttl, 0.01))
	t.Logf("A holds k until %v from now (lockproxy's accounting); masters' PTTLs %v", time.Until(untilA).Round(time.Millisecond), p.pttls("k"))
	refusedUntil(t, b, untilA, ahead)
}

// refusedUntil has b try SET k NX until A's validity ends: with the
// masters' clocks ahead, a lock kept to its absolute deadline on their
// clocks expires there before it.
func refusedUntil(t *testing.T, b *redis.Client, untilA time.Time, ahead time.Duration) {
	t.Helper()
	for time.Now().Before(untilA) {
		ok, err := b.SetNX(context.Background(), "k", "tokB", 10*time.Second).Result()
		if err == nil && ok {
			t.Fatalf("DOUBLE GRANT: B granted k %v before the end of A's validity (masters' clocks %v ahead of lockproxy's; A's lock expired there at its absolute time on their clocks)",
				time.Until(untilA).Round(time.Millisecond), ahead)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
