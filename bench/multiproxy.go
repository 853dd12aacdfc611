package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scenario 5, multiproxy: 1, 2 and 3 lockproxy processes on the same
// masters, as users scale out, with workers spread evenly over them
// contending on a few keys; then the largest number of proxies again with
// one master paused. Every run measures acquisitions/s, the acquire latency
// and how many attempts were refused while the key was free (refused.go):
// split votes between proxies.

// contentionHold is how long a worker of the multiproxy scenario holds a
// lock: short, so that keys change hands often and many attempts race.
const contentionHold = time.Millisecond

// drainTimeout bounds the wait, after a paused master resumes, for every
// proxy's backlog to it to be answered.
const drainTimeout = 30 * time.Second

// MultiProxyResult is one run of the multiproxy scenario.
type MultiProxyResult struct {
	// Proxies is the number of lockproxies the workers were spread over.
	Proxies int
	// Paused: the last master was stopped (SIGSTOP) for the whole run.
	Paused bool
	// Round numbers the repetitions from 1.
	Round         int
	Workers, Keys int
	Hold          time.Duration
	// Elapsed is the counted window.
	Elapsed time.Duration
	// Acquisitions were granted (+OK read) within the window.
	Acquisitions int64
	// Refusals classifies the attempts sent and answered within the
	// window (refused.go).
	Refusals
	// Stats are the proxies' counters over the run (warm-up and the
	// paused master's drain included).
	Stats ProxyStats
	// Load is the machine's 1-minute load average at the run's end.
	Load float64
	// Errors counts failed attempts and releases; FirstErr is the first.
	Errors   int64
	FirstErr string
	// Lat is the acquire latency: first attempt to +OK.
	Lat Latencies
	CPU CPU
}

// Throughput is acquisitions per second.
func (r *MultiProxyResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Acquisitions) / r.Elapsed.Seconds()
}

// FreeShare is the fraction of refused attempts that measure m counts as
// refused while free.
func (r *MultiProxyResult) FreeShare(m Measure) float64 { return share(r.Free[m], r.Refused) }

// EstimateShare is FreeShare(Estimate), the judged figure.
func (r *MultiProxyResult) EstimateShare() float64 { return r.FreeShare(Estimate) }

// TruthShare is the fraction of refused attempts refused while no token
// was on a quorum of masters (with Truth only).
func (r *MultiProxyResult) TruthShare() float64 { return share(r.TruthFree, r.Refused) }

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// variant is one configuration of the scenario.
func (r *MultiProxyResult) variant() string {
	v := fmt.Sprintf("proxies=%d", r.Proxies)
	if r.Paused {
		v += "/paused=1"
	}
	return v
}

// multiProxy is scenario 5. The extra proxies run from the scenario's start
// to its end; a run with fewer proxies leaves the others idle.
func (r *runner) multiProxy(ctx context.Context) {
	if !r.cfg.uses(Lockproxy) || r.c.proxy == nil {
		return
	}
	procs := []*proxyProc{r.c.proxy}
	for len(procs) < r.cfg.MultiProxies {
		p, err := r.c.startExtraProxy(ctx)
		if err != nil {
			r.fail("multiproxy: start lockproxy %d: %v", len(procs)+1, err)
			break
		}
		procs = append(procs, p)
	}
	defer func() {
		if err := r.c.stopExtra(); err != nil {
			r.fail("multiproxy: %v", err)
		}
	}()
	type variant struct {
		proxies int
		paused  bool
	}
	var vs []variant
	for n := 1; n <= len(procs); n++ {
		vs = append(vs, variant{n, false})
	}
	// With a master paused: the largest number of proxies, and 1 proxy
	// as its control (a paused master alone splits no vote).
	vs = append(vs, variant{1, true})
	if len(procs) > 1 {
		vs = append(vs, variant{len(procs), true})
	}
	for round := 1; round <= r.cfg.Rounds; round++ {
		for _, v := range vs {
			if ctx.Err() != nil {
				return
			}
			res, err := r.multiProxyRun(ctx, procs[:v.proxies], v.paused)
			if err != nil {
				r.fail("multiproxy proxies=%d paused=%v: %v", v.proxies, v.paused, err)
			}
			if res != nil {
				res.Round = round
				r.res.MultiProxy = append(r.res.MultiProxy, *res)
			}
		}
	}
}

// multiProxyRun is one run over procs, with the last master paused if
// paused. The master is resumed, and every proxy's backlog to it answered,
// before it returns.
func (r *runner) multiProxyRun(ctx context.Context, procs []*proxyProc, paused bool) (res *MultiProxyResult, err error) {
	spec := contentionSpec{workers: r.cfg.MultiWorkers, keys: r.cfg.MultiKeys, prefix: r.prefix(), hold: contentionHold,
		warmup: r.cfg.Warmup, duration: r.cfg.Duration, q: len(r.c.masters)/2 + 1}
	meter := &cpuMeter{}
	for _, p := range procs {
		spec.addrs = append(spec.addrs, p.addr)
		meter.proxyPids = append(meter.proxyPids, p.pid())
	}
	for _, m := range r.c.masters {
		meter.masterPids = append(meter.masterPids, m.Pid())
	}
	if !r.cfg.MultiProxyNoMonitor {
		// Before a master is paused: it must answer MONITOR.
		if spec.mon, err = startMonitors(r.c.masterAddrs(), spec.prefix); err != nil {
			return nil, fmt.Errorf("MONITOR: %w", err)
		}
		defer spec.mon.stop() // a no-op once runContention stopped it
	}
	if paused {
		last := len(r.c.masters) - 1
		m := r.c.masters[last]
		if err := m.Pause(); err != nil {
			return nil, fmt.Errorf("pause %s: %w", m.Addr, err)
		}
		defer func() {
			if rerr := m.Resume(); rerr != nil {
				err = errors.Join(err, fmt.Errorf("resume %s: %w", m.Addr, rerr))
				return
			}
			err = errors.Join(err, waitDrained(ctx, spec.addrs, last))
		}()
	}
	stats0 := proxyStats(ctx, spec.addrs)
	run, err := runContention(ctx, spec, meter)
	if err != nil {
		return nil, err
	}
	var free []freeAttempt
	res = &MultiProxyResult{Proxies: len(procs), Paused: paused, Workers: spec.workers, Keys: spec.keys, Hold: spec.hold,
		Elapsed: run.cpu.Wall, CPU: run.cpu, Refusals: classify(run.logs, spec.keys, run.from, run.to, run.quorum, &free),
		Stats: proxyStats(ctx, spec.addrs).sub(stats0), Load: run.load}
	if run.quorum != nil {
		w := explain(run.events, spec.keys, run.start, run.logs, free, run.from, run.to, r.cfg.NodeTimeout, spec.q, int(b2i(paused)))
		res.Why, res.Unreachable, res.Leftovers, res.LeftoversResent = w.why, w.unreachable, w.leftovers, w.resent
	}
	lat := make([][]time.Duration, len(run.logs))
	for i, l := range run.logs {
		lat[i] = l.lat
		res.Errors += l.errors
		if l.firstErr != nil && res.FirstErr == "" {
			res.FirstErr = l.firstErr.Error()
		}
	}
	res.Lat = mergeLatencies(lat)
	res.Acquisitions = int64(len(res.Lat))
	q := res.Lat.Summary()
	exact := "not recorded"
	if res.Truth {
		exact = fmt.Sprintf("%d (%.3f%%: split %d, slow %d, left-over tokens %d, no quorum possible %d; median %v), unbacked %d, "+
			"unowned quorums %d, holds cut short %d, left-over tokens %d (re-sent %d)", res.TruthFree, 100*res.TruthShare(), res.Why[CauseSplit],
			res.Why[CauseSlow], res.Why[CauseLeftover], res.Unreachable, res.FreeWait.Round(time.Microsecond), res.Unbacked, res.Unowned,
			res.CutShort, res.Leftovers, res.LeftoversResent)
	}
	fmt.Fprintf(r.cfg.Log, "lockbench: %-15s %-19s workers=%d keys=%d %7.0f acq/s  p50 %v  p99 %v  attempts %d  refused %d  while free: masters %s; estimate %d (%.3f%%), bounds %d–%d  overlapping holds %d  split retries %d  undos %d, unconfirmed %d  errors %d\n",
		ScenarioMultiProxy, res.variant(), spec.workers, spec.keys, res.Throughput(), q.P50.Round(time.Microsecond), q.P99.Round(time.Microsecond),
		res.Attempts, res.Refused, exact, res.Free[Estimate], 100*res.EstimateShare(), res.Free[Lower], res.Free[Upper], res.Overlaps,
		res.Stats.SplitRetries, res.Stats.UndoSent, res.Stats.UndoUnconfirmed, res.Errors)
	switch {
	case res.Attempts == 0:
		// No acquisition at all is a result (votes split every time);
		// no answered attempt is a failure.
		return res, fmt.Errorf("no attempt answered (first error: %s)", res.FirstErr)
	case res.Overlaps > 0:
		return res, fmt.Errorf("%d holds began while another worker held the same key: mutual exclusion violated", res.Overlaps)
	case res.Unbacked > 0:
		// Either the replay of the masters' streams is wrong, or a client
		// read +OK for a lock no quorum held: both must be looked into.
		return res, fmt.Errorf("%d acquisitions not backed by a quorum in the masters' MONITOR record", res.Unbacked)
	}
	return res, nil
}

// waitDrained polls INFO quorum on every proxy until none has anything
// queued or in flight to master i: the backlog a paused master leaves is
// answered (and undone) before the next run starts.
func waitDrained(ctx context.Context, addrs []string, i int) error {
	prefix := "master" + strconv.Itoa(i) + ":"
	deadline := time.Now().Add(drainTimeout)
	for _, a := range addrs {
		c := newClient(a, 1)
		for {
			info, err := c.Info(ctx, "quorum").Result()
			if err == nil && drained(info, prefix) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				c.Close()
				return fmt.Errorf("lockproxy %s: backlog to master %d not answered within %v (%v)", a, i, drainTimeout, err)
			}
			sleepUntil(ctx, time.Now().Add(20*time.Millisecond))
		}
		c.Close()
	}
	return nil
}

// drained reports whether the INFO quorum line of a master (prefix
// "masterN:") shows nothing queued or in flight.
func drained(info, prefix string) bool {
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			return strings.Contains(","+rest+",", ",queued=0,") && strings.Contains(","+rest+",", ",inflight=0,")
		}
	}
	return false
}
