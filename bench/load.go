package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// loadSpec describes one closed-loop run: workers each repeat
// lock → (hold) → unlock as fast as the target answers.
type loadSpec struct {
	workers  int
	warmup   time.Duration // run but not recorded: dials, script loads
	duration time.Duration // recorded
	// keys is the size of the random key space; 1 makes every worker use
	// the same key (the hot-key scenario).
	keys   int
	prefix string        // keeps this run's keys apart from earlier runs'
	hold   time.Duration // time between a successful lock and its unlock
	retry  retryMode     // what to do when the key is held
}

// unlockGrace bounds the unlock of a lock taken just before the deadline.
const unlockGrace = 5 * time.Second

// LoadResult is one run of a Go workload against one target.
type LoadResult struct {
	Target Target
	// Variant tells apart runs of one target with different client
	// settings ("" for the main one).
	Variant string
	Workers int
	// Round numbers the repetitions of scenario 2 from 1; 0 for the
	// scenarios run once.
	Round int
	// Ops is the number of completed lock+unlock pairs started within the
	// recorded window.
	Ops int64
	// NotAcquired counts lock calls that returned without the lock: the key
	// was held (or, with a bounded retry policy, stayed held).
	NotAcquired int64
	// Errors counts failed operations; FirstErr is the first one seen.
	Errors   int64
	FirstErr string
	// Elapsed is the recorded window.
	Elapsed time.Duration
	// Lat holds the acquire latency of every successful lock (with retry:
	// from the first attempt until the lock was taken).
	Lat Latencies
	CPU CPU
}

// Throughput is Ops per second.
func (r *LoadResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// workerStats is what one worker counted; merged after the run.
type workerStats struct {
	ops, notAcquired, errors int64
	firstErr                 error
	lat                      []time.Duration
}

// runLoad runs spec with lockers from f and measures the processes of meter
// over the recorded window. It returns after every worker has stopped: the
// workers stop starting operations at the deadline by themselves, and ctx
// cancels the run early.
func runLoad(ctx context.Context, spec loadSpec, f *lockerFactory, target Target, meter *cpuMeter) LoadResult {
	start := time.Now()
	recordFrom := start.Add(spec.warmup)
	deadline := recordFrom.Add(spec.duration)
	// lockCtx ends at the deadline: it stops retry loops and operations in
	// flight then (their outcome is not counted). opCtx leaves unlocks
	// time to finish so no lock is left behind needlessly.
	lockCtx, cancelLock := context.WithDeadline(ctx, deadline)
	defer cancelLock()
	opCtx, cancelOp := context.WithDeadline(ctx, deadline.Add(unlockGrace))
	defer cancelOp()

	stats := make([]workerStats, spec.workers)
	var wg sync.WaitGroup
	for w := range spec.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runWorker(lockCtx, opCtx, spec, f.newLocker(w, spec.retry), w, recordFrom, deadline, &stats[w])
		}()
	}

	var s0, s1 cpuSnap
	sleepUntil(ctx, recordFrom)
	s0 = meter.snap()
	sleepUntil(ctx, deadline)
	s1 = meter.snap()
	wg.Wait()

	r := LoadResult{Target: target, Workers: spec.workers, Elapsed: s1.at.Sub(s0.at), CPU: meter.since(s0, s1)}
	parts := make([][]time.Duration, len(stats))
	for i := range stats {
		st := &stats[i]
		r.Ops += st.ops
		r.NotAcquired += st.notAcquired
		r.Errors += st.errors
		if st.firstErr != nil && r.FirstErr == "" {
			r.FirstErr = st.firstErr.Error()
		}
		parts[i] = st.lat
	}
	r.Lat = mergeLatencies(parts)
	return r
}

// runWorker is one closed-loop client. A panic (in a client library, say)
// ends this worker only and is counted as an error, so that the scenario's
// clean-up (resuming a paused master) still runs.
func runWorker(lockCtx, opCtx context.Context, spec loadSpec, l locker, w int, recordFrom, deadline time.Time, st *workerStats) {
	defer func() {
		if p := recover(); p != nil {
			st.errors++
			if st.firstErr == nil {
				st.firstErr = fmt.Errorf("worker %d panicked: %v", w, p)
			}
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
	st.lat = make([]time.Duration, 0, 1<<12)
	fail := func(err error, record bool) {
		if !record {
			return
		}
		st.errors++
		if st.firstErr == nil {
			st.firstErr = err
		}
	}
	hotKey := spec.prefix + "hot"
	for lockCtx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(deadline) {
			return
		}
		record := !t0.Before(recordFrom)
		key := hotKey
		if spec.keys > 1 {
			key = spec.prefix + strconv.Itoa(rng.IntN(spec.keys))
		}
		ok, err := l.lock(lockCtx, key)
		t1 := time.Now()
		if !ok && (lockCtx.Err() != nil || !t1.Before(deadline)) {
			// Cut short by the deadline (a socket deadline derived from
			// lockCtx may fire before lockCtx reports it): not an outcome.
			return
		}
		if err != nil {
			fail(err, record)
			// Do not spin on a target that fails fast (refused connections).
			sleepUntil(lockCtx, t1.Add(time.Millisecond))
			continue
		}
		if !ok {
			if record {
				st.notAcquired++
			}
			continue
		}
		if record {
			st.lat = append(st.lat, t1.Sub(t0))
		}
		if spec.hold > 0 {
			time.Sleep(spec.hold)
		}
		if err := l.unlock(opCtx); err != nil {
			if opCtx.Err() != nil {
				return // the run was interrupted
			}
			fail(err, record)
			continue
		}
		if record {
			st.ops++
		}
	}
}

// sleepUntil sleeps until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}
