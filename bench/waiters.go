package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// Scenario 6, waiters: how long a lock waiting on one lockproxy takes to get
// a lock that was released through another, by pub/sub, by BLPOP and by
// polling every 50ms (waitstyles.go). Two lockproxies run on the same
// masters. Each pair of clients, one on each proxy, passes one lock back and
// forth: the holder waits until the other client is waiting, holds the lock
// a while longer, releases it; the waiter takes it and becomes the holder.
// So releases go through both proxies in turn, and every release has
// exactly one waiter.
//
// A hand-over's latency is from the holder's release to the waiter's
// acquisition reply (+OK, or Redisson's nil), on this process's monotonic
// clock; it is measured from the moment the release's reply was read and
// from the moment it was sent. The first may be slightly negative: the
// waiter can hear of the release, and take the lock, before the holder has
// read its own reply.

// Hold of the waiters scenario: after the waiter is waiting, the holder
// keeps the lock waitHoldMin plus a random part of up to pollInterval, so
// that a release falls at a uniformly random moment of a poller's cycle (a
// fixed hold would make every poll land at the same phase).
const waitHoldMin = 2 * time.Millisecond

// errFreeWhileHeld is a waiter's first attempt granted while the other
// client of its pair held the lock.
var errFreeWhileHeld = errors.New("bench: a waiter got the lock while the other client held it")

// WaitCounts are what the waiters of one run counted.
type WaitCounts struct {
	// Waits for a release, one per hand-over.
	Waits int64
	// Attempts are the waiters' acquisition attempts (their first,
	// refused one included).
	Attempts int64
	// Hints are the wake-ups for a release: a message read, a signal
	// popped. A poll is none.
	Hints int64
	// Spurious hints were followed by a refused attempt.
	Spurious int64
	// Missed waits ended by their timeout (waitTimeout): no hint came.
	Missed int64
	// Messages are, for pub/sub, those read while subscribed; Extra those
	// beyond one per release.
	Messages, Extra int64
}

func (c *WaitCounts) add(o WaitCounts) {
	c.Waits += o.Waits
	c.Attempts += o.Attempts
	c.Hints += o.Hints
	c.Spurious += o.Spurious
	c.Missed += o.Missed
	c.Messages += o.Messages
	c.Extra += o.Extra
}

// WaitersResult is one run of one style.
type WaitersResult struct {
	Style WaitStyle
	Round int
	// Pairs of clients, each passing its own lock between the proxies.
	Pairs int
	// Elapsed is the counted window.
	Elapsed time.Duration
	// Handovers counts the releases sent within the window whose waiter
	// got the lock.
	Handovers int64
	// FromReply and FromSent are the hand-overs' latencies from the
	// release's reply and from its sending.
	FromReply, FromSent Latencies
	// WaitCounts are those of the counted hand-overs' waits.
	WaitCounts
	// Load is the machine's 1-minute load average at the run's end.
	Load float64
	// Errors counts failed commands; FirstErr is the first.
	Errors   int64
	FirstErr string
	CPU      CPU
}

// Throughput is hand-overs per second.
func (r *WaitersResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Handovers) / r.Elapsed.Seconds()
}

// handover is one release and the acquisition it let through, on the
// run's clock, with the counts of that wait.
type handover struct {
	relSent, relReply, acquired time.Duration
	counts                      WaitCounts
}

// waitLog is what one pair recorded.
type waitLog struct {
	handovers []handover
	errors    int64
	firstErr  error
}

func (l *waitLog) fail(err error) {
	l.errors++
	if l.firstErr == nil {
		l.firstErr = err
	}
}

// waitSpec is one run of the scenario.
type waitSpec struct {
	style            WaitStyle
	addrs            [2]string // the two proxies
	pairs            int
	prefix           string
	warmup, duration time.Duration
}

// runWaiters runs spec and measures meter's processes over its window.
func runWaiters(ctx context.Context, spec waitSpec, meter *cpuMeter) (*WaitersResult, error) {
	start := time.Now()
	from, to := spec.warmup, spec.warmup+spec.duration
	lockCtx, cancelLock := context.WithDeadline(ctx, start.Add(to))
	defer cancelLock()
	opCtx, cancelOp := context.WithDeadline(ctx, start.Add(to+unlockGrace))
	defer cancelOp()

	pairs := make([][2]waitLock, spec.pairs)
	for p := range pairs {
		name := spec.prefix + "w" + strconv.Itoa(p)
		for s := range pairs[p] {
			l, err := newWaitLock(spec.style, spec.addrs[s], name)
			if err != nil {
				return nil, err
			}
			defer l.close()
			pairs[p][s] = l
		}
	}
	logs := make([]waitLog, spec.pairs)
	var wg sync.WaitGroup
	for p, ls := range pairs {
		wg.Go(func() { runPair(lockCtx, opCtx, ls, start, &logs[p]) })
	}
	sleepUntil(ctx, start.Add(from))
	s0 := meter.snap()
	sleepUntil(ctx, start.Add(to))
	s1 := meter.snap()
	load := loadAvg()
	wg.Wait()
	res := collectWaiters(logs, from, to)
	res.Load = load
	res.Style, res.Pairs, res.Elapsed, res.CPU = spec.style, spec.pairs, s1.at.Sub(s0.at), meter.since(s0, s1)
	return res, ctx.Err()
}

// collectWaiters gathers the hand-overs whose release was sent within
// [from, to).
func collectWaiters(logs []waitLog, from, to time.Duration) *WaitersResult {
	res := &WaitersResult{}
	var reply, sent [][]time.Duration
	for _, l := range logs {
		var r, s []time.Duration
		for _, h := range l.handovers {
			if h.relSent < from || h.relSent >= to {
				continue
			}
			res.Handovers++
			r = append(r, h.acquired-h.relReply)
			s = append(s, h.acquired-h.relSent)
			res.WaitCounts.add(h.counts)
		}
		reply, sent = append(reply, r), append(sent, s)
		res.Errors += l.errors
		if l.firstErr != nil && res.FirstErr == "" {
			res.FirstErr = l.firstErr.Error()
		}
	}
	res.FromReply, res.FromSent = mergeLatencies(reply), mergeLatencies(sent)
	return res
}

// pairChans carry a pair's hand-overs between its two clients' goroutines.
// Only one client holds the lock at a time, so each channel has one
// sender and one receiver at any moment.
type pairChans struct {
	parked   chan struct{} // the waiter is about to wait: the holder may release
	released chan handover // the holder's release, sent and answered
	taken    chan struct{} // the waiter has the lock: the old holder may try
}

// runPair passes one lock back and forth between ls[0] (the first proxy)
// and ls[1] until lockCtx ends; the client holding it then releases it
// within opCtx.
func runPair(lockCtx, opCtx context.Context, ls [2]waitLock, start time.Time, log *waitLog) {
	ch := pairChans{make(chan struct{}, 1), make(chan handover, 1), make(chan struct{}, 1)}
	// The first client takes the lock before the other starts waiting.
	for {
		ok, err := ls[0].try(lockCtx)
		if err != nil || lockCtx.Err() != nil {
			if lockCtx.Err() == nil {
				log.fail(fmt.Errorf("first acquisition: %w", err))
			}
			return
		}
		if ok {
			break
		}
		sleepUntil(lockCtx, time.Now().Add(pollInterval))
	}
	var mu sync.Mutex // protects log: both goroutines record into it
	var wg sync.WaitGroup
	for s := range ls {
		wg.Go(func() {
			var own waitLog
			runClient(lockCtx, opCtx, ls[s], s == 0, ch, start, &own)
			mu.Lock()
			log.handovers = append(log.handovers, own.handovers...)
			log.errors += own.errors
			if log.firstErr == nil {
				log.firstErr = own.firstErr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
}

// runClient is one client of a pair: as the holder it releases once the
// other waits, as the waiter it takes the lock in its style's way, until
// lockCtx ends.
func runClient(lockCtx, opCtx context.Context, l waitLock, holding bool, ch pairChans, start time.Time, log *waitLog) {
	now := func() time.Duration { return time.Since(start) }
	deadline, _ := lockCtx.Deadline()
	// ended: the run is over. A socket deadline derived from lockCtx
	// may fire before lockCtx reports it: such an error is no failure.
	ended := func() bool { return lockCtx.Err() != nil || !time.Now().Before(deadline) }
	recv := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		case <-lockCtx.Done():
			return false
		}
	}
	defer func() {
		if holding {
			if err := l.release(opCtx); err != nil && opCtx.Err() == nil {
				log.fail(fmt.Errorf("last release: %w", err))
			}
		}
	}()
	for lockCtx.Err() == nil {
		if holding {
			if !recv(ch.parked) {
				return
			}
			sleepUntil(lockCtx, time.Now().Add(waitHoldMin+rand.N(pollInterval)))
			h := handover{relSent: now()}
			err := l.release(opCtx)
			h.relReply = now()
			holding = false
			if err != nil {
				// The waiter may get the lock at its TTL, or never
				// within the run: it is not waited for.
				log.fail(fmt.Errorf("release: %w", err))
			}
			ch.released <- h
			if !recv(ch.taken) {
				return
			}
			continue
		}
		var c WaitCounts
		at, err := acquireWaiting(lockCtx, l, func() { ch.parked <- struct{}{} }, now, &c)
		if err != nil {
			if !ended() {
				log.fail(err)
			}
			return
		}
		holding = true
		select {
		case h := <-ch.released:
			h.acquired, h.counts = at, c
			log.handovers = append(log.handovers, h)
		case <-lockCtx.Done():
			return
		}
		ch.taken <- struct{}{}
	}
}

// acquireWaiting takes the lock as l's library does while another client
// holds it, calling parked once l is ready to be woken, and returns when
// its successful attempt was answered, by now.
func acquireWaiting(ctx context.Context, l waitLock, parked func(), now func() time.Duration, c *WaitCounts) (time.Duration, error) {
	c.Waits++
	c.Attempts++
	ok, err := l.try(ctx)
	switch {
	case err != nil:
		return 0, err
	case ok:
		return 0, errFreeWhileHeld
	}
	if err := l.park(ctx); err != nil {
		return 0, fmt.Errorf("park: %w", err)
	}
	if l.triesAfterPark() {
		c.Attempts++
		switch ok, err := l.try(ctx); {
		case err != nil:
			return 0, err
		case ok:
			return 0, errFreeWhileHeld
		}
	}
	parked()
	for {
		w, err := l.wait(ctx)
		if err != nil {
			return 0, fmt.Errorf("wait: %w", err)
		}
		switch w {
		case wokeHint:
			c.Hints++
		case wokeTimeout:
			c.Missed++
		}
		c.Attempts++
		ok, err := l.try(ctx)
		at := now()
		if err != nil {
			return 0, err
		}
		if ok {
			return at, l.unpark(ctx, c)
		}
		if w == wokeHint {
			c.Spurious++
		}
	}
}
