package bench

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWaitScriptsAreVerbatim: the embedded scripts are the clients' own,
// by the sha1s of the corpus's MANIFEST.json (and byte for byte, where the
// corpus is beside the checkout).
func TestWaitScriptsAreVerbatim(t *testing.T) {
	for _, s := range []struct{ name, body, sha1 string }{
		{"redisson-4.x_tryLockInner", redissonTryLockBody, "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"},
		{"redisson-4.x_unlockInner", redissonUnlockBody, "6866459238a13a701d42f4971f12d9f3a50e2442"},
		{"python-redis-lock_unlock", pyLockUnlockBody, "90da91872223f85eb1376a17e3c4df21ace8c54b"},
	} {
		if sum := sha1.Sum([]byte(s.body)); hex.EncodeToString(sum[:]) != s.sha1 {
			t.Errorf("%s: sha1 %x, the corpus has %s", s.name, sum, s.sha1)
		}
		b, err := os.ReadFile(filepath.Join("..", "..", "shared", "clients", "scripts", s.name+".lua"))
		if err == nil && string(b) != s.body {
			t.Errorf("%s differs from the corpus's copy", s.name)
		}
	}
}

// fakeWait is a waitLock over a lock shared in memory: a release hints the
// one waiter through a channel. hint false makes it a poller.
type fakeWait struct {
	st   *fakeLockState
	me   int
	hint bool
}

type fakeLockState struct {
	mu       sync.Mutex
	holder   int // -1: free
	released chan struct{}
	overlap  bool // a grant while another held it
}

func (f *fakeWait) try(context.Context) (bool, error) {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	if f.st.holder >= 0 && f.st.holder != f.me {
		return false, nil
	}
	f.st.holder = f.me
	return true, nil
}

func (f *fakeWait) park(context.Context) error { return nil }
func (f *fakeWait) triesAfterPark() bool       { return f.hint }

func (f *fakeWait) wait(ctx context.Context) (wake, error) {
	if !f.hint {
		sleepUntil(ctx, time.Now().Add(time.Millisecond))
		return wokePoll, ctx.Err()
	}
	select {
	case <-f.st.released:
		return wokeHint, nil
	case <-ctx.Done():
		return wokeTimeout, ctx.Err()
	}
}

func (f *fakeWait) unpark(context.Context, *WaitCounts) error { return nil }

func (f *fakeWait) release(context.Context) error {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	if f.st.holder != f.me {
		return errNotReleased
	}
	f.st.holder = -1
	select {
	case f.st.released <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeWait) close() {}

// TestRunPairHandsOver: the two clients of a pair take turns, each
// release has its waiter's acquisition after it, and the lock is free at
// the end.
func TestRunPairHandsOver(t *testing.T) {
	for _, hint := range []bool{true, false} {
		st := &fakeLockState{holder: -1, released: make(chan struct{}, 1)}
		ls := [2]waitLock{&fakeWait{st, 0, hint}, &fakeWait{st, 1, hint}}
		start := time.Now()
		lockCtx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		var log waitLog
		runPair(lockCtx, context.Background(), ls, start, &log)
		if log.errors != 0 {
			t.Fatalf("hint=%v: %d errors, first %v", hint, log.errors, log.firstErr)
		}
		if len(log.handovers) < 3 {
			t.Fatalf("hint=%v: %d hand-overs in 400ms", hint, len(log.handovers))
		}
		for _, h := range log.handovers {
			if h.relSent > h.relReply || h.acquired < h.relSent || h.counts.Waits != 1 || h.counts.Attempts < 2 {
				t.Errorf("hint=%v: hand-over %+v", hint, h)
			}
			if hint && (h.counts.Hints != 1 || h.counts.Attempts != 3 || h.counts.Spurious != 0) {
				t.Errorf("hint=%v: one hint and three attempts per hand-over, got %+v", hint, h.counts)
			}
		}
		if st.holder != -1 {
			t.Errorf("hint=%v: the lock is left held by %d", hint, st.holder)
		}
	}
}

// scriptedWait answers try from a list and wait from another.
type scriptedWait struct {
	tries []bool
	wakes []wake
}

func (s *scriptedWait) try(context.Context) (bool, error) {
	ok := s.tries[0]
	s.tries = s.tries[1:]
	return ok, nil
}
func (s *scriptedWait) park(context.Context) error { return nil }
func (s *scriptedWait) triesAfterPark() bool       { return false }
func (s *scriptedWait) wait(context.Context) (wake, error) {
	w := s.wakes[0]
	s.wakes = s.wakes[1:]
	return w, nil
}
func (s *scriptedWait) unpark(context.Context, *WaitCounts) error { return nil }
func (s *scriptedWait) release(context.Context) error             { return nil }
func (s *scriptedWait) close()                                    {}

func TestAcquireWaitingCounts(t *testing.T) {
	l := &scriptedWait{tries: []bool{false, false, false, true}, wakes: []wake{wokeHint, wokeTimeout, wokeHint}}
	var c WaitCounts
	parked := 0
	at, err := acquireWaiting(context.Background(), l, func() { parked++ }, func() time.Duration { return ms(7) }, &c)
	if err != nil || at != ms(7) || parked != 1 {
		t.Fatalf("acquireWaiting = %v, %v, parked %d", at, err, parked)
	}
	want := WaitCounts{Waits: 1, Attempts: 4, Hints: 2, Spurious: 1, Missed: 1}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	_, err = acquireWaiting(context.Background(), &scriptedWait{tries: []bool{true}}, func() {}, func() time.Duration { return 0 }, &c)
	if !errors.Is(err, errFreeWhileHeld) {
		t.Errorf("a first attempt granted: %v, want errFreeWhileHeld", err)
	}
}

func TestCollectWaiters(t *testing.T) {
	one := WaitCounts{Waits: 1, Attempts: 3, Hints: 1}
	logs := []waitLog{{handovers: []handover{
		{relSent: ms(5), relReply: ms(6), acquired: ms(7), counts: one},       // before the window
		{relSent: ms(10), relReply: ms(12), acquired: ms(11), counts: one},    // acquired before the reply was read
		{relSent: ms(20), relReply: ms(21), acquired: ms(24), counts: one},    // counted
		{relSent: ms(100), relReply: ms(101), acquired: ms(102), counts: one}, // after it
	}, errors: 1, firstErr: errNotReleased}, {handovers: []handover{
		{relSent: ms(50), relReply: ms(52), acquired: ms(60), counts: WaitCounts{Waits: 1, Attempts: 2, Missed: 1}},
	}}}
	r := collectWaiters(logs, ms(10), ms(100))
	if r.Handovers != 3 || r.Errors != 1 || r.FirstErr != errNotReleased.Error() {
		t.Fatalf("collectWaiters = %+v", r)
	}
	if got, want := r.FromReply, (Latencies{-ms(1), ms(3), ms(8)}); !slicesEqual(got, want) {
		t.Errorf("FromReply %v, want %v", got, want)
	}
	if got, want := r.FromSent, (Latencies{ms(1), ms(4), ms(10)}); !slicesEqual(got, want) {
		t.Errorf("FromSent %v, want %v", got, want)
	}
	if want := (WaitCounts{Waits: 3, Attempts: 8, Hints: 2, Missed: 1}); r.WaitCounts != want {
		t.Errorf("counts %+v, want %+v", r.WaitCounts, want)
	}
}

func slicesEqual(a, b Latencies) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitersFixture is three rounds of every style.
func waitersFixture() *Results {
	res := &Results{Config: Config{}.withDefaults()}
	for round := 1; round <= 3; round++ {
		for i, s := range WaitStyles {
			base := ms(1 + 20*i)
			r := WaitersResult{Style: s, Round: round, Pairs: 8, Elapsed: 5 * time.Second, Handovers: 1000,
				FromReply:  Latencies{base, base + ms(round), base + ms(10*round)},
				FromSent:   Latencies{base + ms(2), base + ms(3), base + ms(30)},
				WaitCounts: WaitCounts{Waits: 1000, Attempts: 3000, Hints: 1000}, Load: 1.5, CPU: CPU{Wall: 5 * time.Second, Proxy: time.Second,
					Masters: []time.Duration{time.Second}, Client: time.Second}}
			res.Waiters = append(res.Waiters, r)
		}
	}
	return res
}

func TestWaitersReport(t *testing.T) {
	res := waitersFixture()
	var b bytes.Buffer
	res.waitersMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"## 6. Waiting for a lock",
		// Median over rounds of the p50 from the reply (2, 3, 4 ms: 3) and
		// the p99 (11, 21, 31 ms: 21); from the sending 4 and 31 every round.
		"| pub/sub (Redisson 4) | 3.00 | 21.0 | 4.00 | 31.0 | 200 | 3.00 | 3000 |",
		"| polling every 50 ms | 43.0 | 61.0 |",
		"| BLPOP (python-redis-lock) | 2 | 1.5 | 1000 | 23.0 | 41.0 | 24.0 | 51.0 | 3000 | 1000 | 0 | 0 | 0 | 0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	cs := res.waitersChecks()
	if len(cs) != 2 || !cs[0].Pass || cs[0].Value != "0 / 0 of 6000 waits" || !cs[1].Info ||
		cs[1].Value != "4.00 / 31.0 ms · 24.0 / 51.0 ms · 44.0 / 71.0 ms" {
		t.Errorf("checks %+v", cs)
	}
	res.Waiters[4].Missed = 1 // BLPOP, round 2
	if cs := res.waitersChecks(); cs[0].Pass || cs[0].Value != "1 / 0 of 6000 waits" {
		t.Errorf("a missed wake-up passes: %+v", cs[0])
	}
	b.Reset()
	res.waitersBenchLines(&b)
	if n := strings.Count(b.String(), "BenchmarkLockproxy/waiters/style="); n != 9 {
		t.Errorf("%d bench lines, want 9:\n%s", n, b.String())
	}
	if !strings.Contains(b.String(), "BenchmarkLockproxy/waiters/style=poll-50ms/pairs=8-") {
		t.Errorf("bench lines:\n%s", b.String())
	}
}
