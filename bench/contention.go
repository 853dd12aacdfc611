package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The workload of the multiproxy scenario: workers spread over several
// lockproxies contend on a few keys, and every attempt and every hold is
// recorded on this process's monotonic clock, so that refused attempts can
// be matched against the holds of the same key afterwards (refused.go).

// contentionSpec is one run of the multiproxy workload.
type contentionSpec struct {
	// addrs are the proxies; worker w sends everything to addrs[w%len].
	addrs    []string
	workers  int
	keys     int
	prefix   string
	hold     time.Duration // between an acquisition and its release
	warmup   time.Duration // run, recorded for the classification, not counted
	duration time.Duration // counted
	// mon, when not nil, records the masters' MONITOR streams (truth.go),
	// of a quorum of q.
	mon *monitors
	q   int
}

// outcome is how an attempt ended.
type outcome uint8

const (
	granted outcome = iota // +OK
	refused                // nil: the key is held, says lockproxy
	// errored: an error reply from lockproxy (NOQUORUM): not granted, and
	// undone where it applied.
	errored
	// unknown: no reply (network error, timeout, cut short by the end of
	// the run): it may have been granted.
	unknown
)

// attempt is one SET NX, on the run's clock (time since the run started).
type attempt struct {
	sent, reply time.Duration
	key         int32
	outcome     outcome
	token       uint64 // the worker's for this key until granted (why.go)
}

// holding is one acquisition: the attempt that got +OK, and its release.
type holding struct {
	key         int32
	token       uint64 // sent in base 36
	sent, reply time.Duration
	releaseSent time.Duration
	released    time.Duration // the release's reply was read
	// releaseFailed: the release got an error (NOQUORUM, or no reply), so
	// when the key left a quorum of masters is not known: it may have
	// stayed until its TTL.
	releaseFailed bool
}

// contentionLog is what a worker recorded.
type contentionLog struct {
	attempts []attempt
	holds    []holding
	lat      []time.Duration // first attempt to acquisition, of counted acquisitions
	errors   int64
	firstErr error
}

// contentionRun is what runContention recorded.
type contentionRun struct {
	logs     []contentionLog // per worker
	from, to time.Duration   // the counted window on the run's clock
	cpu      CPU             // of the meter's processes over the window
	load     float64         // the machine's 1-minute load average at the window's end
	// quorum are, per key, the tokens that were on a quorum of masters and
	// when, from the masters' MONITOR streams (events, stamped from start);
	// nil without spec.mon.
	quorum [][]quorumHold
	events [][]monitorEvent
	start  time.Time
}

// runContention runs spec and returns what it recorded.
func runContention(ctx context.Context, spec contentionSpec, meter *cpuMeter) (contentionRun, error) {
	start := time.Now()
	from, to := spec.warmup, spec.warmup+spec.duration
	// lockCtx ends the attempts at the end of the window; releases get
	// unlockGrace more, so that no key is left held.
	lockCtx, cancelLock := context.WithDeadline(ctx, start.Add(to))
	defer cancelLock()
	opCtx, cancelOp := context.WithDeadline(ctx, start.Add(to+unlockGrace))
	defer cancelOp()

	perProxy := (spec.workers + len(spec.addrs) - 1) / len(spec.addrs)
	clients := make([]*redis.Client, len(spec.addrs))
	for i, a := range spec.addrs {
		clients[i] = newClient(a, perProxy)
		defer clients[i].Close()
	}
	logs := make([]contentionLog, spec.workers)
	var wg sync.WaitGroup
	for w := range spec.workers {
		wg.Go(func() {
			contend(lockCtx, opCtx, spec, clients[w%len(clients)], w, start, &logs[w])
		})
	}
	sleepUntil(ctx, start.Add(from))
	s0 := meter.snap()
	sleepUntil(ctx, start.Add(to))
	s1 := meter.snap()
	load := loadAvg()
	wg.Wait()
	run := contentionRun{logs: logs, from: from, to: to, cpu: meter.since(s0, s1), load: load}
	if spec.mon != nil {
		// The last releases' DELs reach the streams a moment after their
		// replies reached the workers.
		time.Sleep(100 * time.Millisecond)
		events, err := spec.mon.stop()
		if err != nil {
			return run, fmt.Errorf("MONITOR: %w", err)
		}
		run.quorum = quorumHolds(events, spec.keys, spec.q, start)
		run.events, run.start = events, start
	}
	return run, nil
}

// contend is one worker: pick a key, try SET NX until it is granted
// (backoff() between attempts, as single-node lock code does), hold it,
// release it with the compare-and-delete script; again until lockCtx ends.
func contend(lockCtx, opCtx context.Context, spec contentionSpec, c *redis.Client, w int, start time.Time, log *contentionLog) {
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(w)))
	end := spec.warmup + spec.duration
	fail := func(err error) {
		log.errors++
		if log.firstErr == nil {
			log.firstErr = err
		}
	}
	for lockCtx.Err() == nil {
		k := int32(rng.IntN(spec.keys))
		key := spec.prefix + strconv.Itoa(int(k))
		tok := rng.Uint64()
		token := strconv.FormatUint(tok, 36)
		first := time.Since(start)
		var a attempt
		for {
			a = attempt{key: k, token: tok, sent: time.Since(start)}
			err := c.Do(lockCtx, "SET", key, token, "NX", "PX", lockTTL.Milliseconds()).Err()
			a.reply = time.Since(start)
			var re redis.Error
			switch {
			case err == redis.Nil:
				a.outcome = refused
			case errors.As(err, &re):
				a.outcome = errored
				fail(err)
			case err != nil:
				a.outcome = unknown
				// Cut short at the end of the run (a socket deadline
				// derived from lockCtx may fire before lockCtx reports
				// it) is not an error, though it may have been granted.
				if lockCtx.Err() == nil && a.reply < end {
					fail(err)
				}
			}
			log.attempts = append(log.attempts, a)
			if a.outcome != refused {
				break
			}
			sleepUntil(lockCtx, start.Add(a.reply+backoff(0)))
			if lockCtx.Err() != nil {
				return
			}
		}
		if a.outcome != granted {
			// Do not spin on a proxy that fails fast.
			sleepUntil(lockCtx, start.Add(a.reply+time.Millisecond))
			continue
		}
		if a.reply >= spec.warmup && a.reply < end {
			log.lat = append(log.lat, a.reply-first)
		}
		time.Sleep(spec.hold)
		h := holding{key: k, token: tok, sent: a.sent, reply: a.reply, releaseSent: time.Since(start)}
		n, err := releaseScript.Run(opCtx, c, []string{key}, token).Int64()
		h.released = time.Since(start)
		switch {
		case err != nil:
			fail(err)
			h.releaseFailed = true
		case n != 1:
			// A holder's release that finds its lock gone: lockproxy
			// counted fewer than a quorum of masters deleting it (some
			// did not answer in time). It was sent to every master.
			fail(errNotReleased)
		}
		log.holds = append(log.holds, h)
	}
}
