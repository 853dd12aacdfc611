package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// runner holds what the scenarios share.
type runner struct {
	cfg   Config
	c     *cluster
	meter *cpuMeter
	res   *Results
	runs  int // numbers key prefixes so no run sees another run's keys
}

func (r *runner) prefix() string {
	r.runs++
	return fmt.Sprintf("lb%d:", r.runs)
}

func (r *runner) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Errors = append(r.res.Errors, msg)
	fmt.Fprintln(r.cfg.Log, "lockbench: ERROR:", msg)
}

// Scenario 1's redis-benchmark settings.
const (
	benchClients = 50
	benchTimeout = 30 * time.Second // beyond 4 Durations
)

// benchPipelines are scenario 1's pipeline depths (-P).
var benchPipelines = []int{1, 16}

// redisBenchmark is scenario 1. Each run is sized from a short calibration
// run (which also warms the target up) so that it lasts about Duration.
// With twemproxy measured, the proxies are profiled in extra runs after the
// rounds (profile.go).
func (r *runner) redisBenchmark(ctx context.Context) {
	for _, pipeline := range benchPipelines {
		for round := 1; round <= r.cfg.Rounds; round++ {
			for _, t := range r.redisBenchmarkTargets() {
				r.redisBenchmarkRun(ctx, t, pipeline, round)
			}
		}
	}
	if r.cfg.measuresTwemproxy() && !r.cfg.NoProxyProfile {
		r.proxyProfiles(ctx)
	}
	if r.c.one != nil {
		// Only scenario 1 drives it: the later scenarios' masters and
		// machine do not carry an idle second proxy.
		if err := r.c.one.stop(); err != nil {
			r.fail("stopping lockproxy on one master: %v", err)
		}
		r.c.one = nil
	}
	if r.c.floor != nil {
		if err := r.c.floor.stop(); err != nil {
			r.fail("stopping the floor fan-out proxy: %v", err)
		}
		r.c.floor = nil
	}
}

// redisBenchmarkTargets are the targets of scenario 1, in the order each
// round runs them.
func (r *runner) redisBenchmarkTargets() []Target {
	var ts []Target
	for _, t := range []Target{Direct, Twemproxy, Lockproxy} {
		if r.cfg.uses(t) && (t != Twemproxy || r.cfg.measuresTwemproxy()) {
			ts = append(ts, t)
		}
	}
	if r.c.one != nil {
		ts = append(ts, LockproxyOne)
	}
	if r.c.floor != nil {
		ts = append(ts, Floor)
	}
	return ts
}

// benchEndpoint returns the address redis-benchmark drives for target t and
// a meter whose proxy is t's proxy process (none for direct Redis).
func (r *runner) benchEndpoint(t Target) (string, *proxyProc, *cpuMeter) {
	switch t {
	case Lockproxy:
		return r.c.proxy.addr, r.c.proxy, r.c.meterFor(r.c.proxy)
	case Twemproxy:
		return r.c.twem.addr, r.c.twem, r.c.meterFor(r.c.twem)
	case LockproxyOne:
		return r.c.one.addr, r.c.one, r.c.meterFor(r.c.one)
	case Floor:
		return r.c.floor.addr, r.c.floor, r.c.meterFor(r.c.floor)
	}
	return r.c.masters[0].Addr, nil, r.c.meterFor(nil)
}

// calibrate runs redis-benchmark briefly against addr (which also warms the
// target up) and returns the request count that lasts about Duration.
func (r *runner) calibrate(ctx context.Context, addr string, pipeline int, meter *cpuMeter) (int, error) {
	cal, err := runRedisBenchmark(ctx, addr, benchClients, pipeline, max(2000, benchClients*pipeline*40), r.cfg.Keys, r.prefix(),
		meter, r.benchLimit())
	if err != nil {
		return 0, err
	}
	return max(1000, int(cal.RPS*r.cfg.Duration.Seconds())), nil
}

func (r *runner) benchLimit() time.Duration { return 4*r.cfg.Duration + benchTimeout }

// redisBenchmarkRun is one calibrated redis-benchmark run of scenario 1.
func (r *runner) redisBenchmarkRun(ctx context.Context, t Target, pipeline, round int) {
	clients := benchClients
	addr, _, meter := r.benchEndpoint(t)
	n, err := r.calibrate(ctx, addr, pipeline, meter)
	if err != nil {
		r.fail("redis-benchmark %s -P %d calibration: %v", t, pipeline, err)
		return
	}
	res, err := runRedisBenchmark(ctx, addr, clients, pipeline, n, r.cfg.Keys, r.prefix(), meter, r.benchLimit())
	if err != nil {
		r.fail("redis-benchmark %s -P %d: %v", t, pipeline, err)
		return
	}
	res.Target, res.Round = t, round
	r.res.RedisBench = append(r.res.RedisBench, res)
	proxy := ""
	if res.CPU.Proxy >= 0 {
		proxy = fmt.Sprintf("  %s CPU %.2f µs/req (sys %.2f), %.2f syscalls/req", t, perReq(res.CPU.Proxy, res.Requests),
			perReq(res.CPU.ProxySys, res.Requests), float64(res.CPU.ProxyIO.Total())/float64(res.Requests))
	}
	fmt.Fprintf(r.cfg.Log, "lockbench: redis-benchmark %-9s -c %d -P %-2d round %d  %9.0f req/s  p50 %v  p99 %v%s\n",
		t, clients, pipeline, round, res.RPS, res.Lat.P50.Round(time.Microsecond), res.Lat.P99.Round(time.Microsecond), proxy)
}

// load runs one Go workload against target t.
func (r *runner) load(ctx context.Context, name string, t Target, spec loadSpec) (*LoadResult, error) {
	f, err := newFactory(t, r.c, spec.workers)
	if err != nil {
		return nil, err
	}
	defer f.close()
	res := runLoad(ctx, spec, f, t, r.meter)
	q := res.Lat.Summary()
	fmt.Fprintf(r.cfg.Log, "lockbench: %-15s %-9s retry=%d workers=%-3d %9.0f ops/s  p50 %v  p99 %v  p99.9 %v  not-acquired %d  errors %d\n",
		name, t, spec.retry, spec.workers, res.Throughput(), q.P50.Round(time.Microsecond), q.P99.Round(time.Microsecond),
		q.P999.Round(time.Microsecond), res.NotAcquired, res.Errors)
	if res.Ops == 0 {
		return &res, fmt.Errorf("%s %s workers=%d: no operation completed (first error: %s)", name, t, spec.workers, res.FirstErr)
	}
	return &res, nil
}

// acquireRelease is scenario 2.
func (r *runner) acquireRelease(ctx context.Context) {
	for _, w := range r.cfg.Workers {
		for round := 1; round <= r.cfg.Rounds; round++ {
			for _, t := range r.cfg.loadTargets() {
				spec := loadSpec{workers: w, warmup: r.cfg.Warmup, duration: r.cfg.Duration, keys: r.cfg.Keys, prefix: r.prefix()}
				res, err := r.load(ctx, ScenarioAcquireRelease, t, spec)
				if err != nil {
					r.fail("%v", err)
				}
				if res != nil {
					res.Round = round
					r.res.AcquireRelease = append(r.res.AcquireRelease, *res)
				}
			}
		}
	}
}

// hotKey is scenario 3: every worker wants the same key, retries until it
// gets it, holds it 1ms. redsync runs twice: with the single-node clients'
// backoff (the comparison the targets judge), and with its default retry
// policy, which spreads attempts out and so splits fewer votes.
func (r *runner) hotKey(ctx context.Context) {
	type variant struct {
		t     Target
		retry retryMode
		name  string
	}
	var vs []variant
	for _, t := range r.cfg.loadTargets() {
		vs = append(vs, variant{t, retryBackoff, ""})
		if t == Redsync {
			vs = append(vs, variant{t, retryDefault, RedsyncDefaultRetry})
		}
	}
	for _, v := range vs {
		spec := loadSpec{workers: r.cfg.HotWorkers, warmup: r.cfg.Warmup, duration: r.cfg.Duration, keys: 1,
			prefix: r.prefix(), hold: time.Millisecond, retry: v.retry}
		res, err := r.load(ctx, ScenarioHotKey, v.t, spec)
		if err != nil {
			r.fail("%v", err)
		}
		if res != nil {
			res.Variant = v.name
			r.res.HotKey = append(r.res.HotKey, *res)
		}
	}
}

// degraded is scenario 4: acquire-release at the largest worker count
// through lockproxy while the last master is paused. The master is resumed
// before degraded returns, whatever happens (panics included).
func (r *runner) degraded(ctx context.Context) {
	if !r.cfg.uses(Lockproxy) {
		return
	}
	w := slices.Max(r.cfg.Workers)
	spec := func() loadSpec {
		return loadSpec{workers: w, warmup: r.cfg.Warmup, duration: r.cfg.Duration, keys: r.cfg.Keys, prefix: r.prefix()}
	}
	r.res.DegradedBase = r.res.find(ScenarioAcquireRelease, Lockproxy, w)
	if r.res.DegradedBase == nil {
		base, err := r.load(ctx, "unpaused", Lockproxy, spec())
		if err != nil {
			r.fail("degraded baseline: %v", err)
		}
		r.res.DegradedBase = base
	}
	m := r.c.masters[len(r.c.masters)-1]
	if err := m.Pause(); err != nil {
		r.fail("degraded: pause %s: %v", m.Addr, err)
		return
	}
	defer func() {
		if err := m.Resume(); err != nil {
			r.fail("degraded: resume %s: %v", m.Addr, err)
		}
	}()
	res, err := r.load(ctx, ScenarioDegraded, Lockproxy, spec())
	if err != nil {
		r.fail("degraded: %v", err)
	}
	r.res.Degraded = res
}

// waiters is scenario 6 (waiters.go): the styles one after the other in
// each round, on the first lockproxy and one more started for it.
func (r *runner) waiters(ctx context.Context) {
	if !r.cfg.uses(Lockproxy) || r.c.proxy == nil {
		return
	}
	b, err := r.c.startExtraProxy(ctx)
	if err != nil {
		r.fail("waiters: start a second lockproxy: %v", err)
		return
	}
	defer func() {
		if err := r.c.stopExtra(); err != nil {
			r.fail("waiters: %v", err)
		}
	}()
	meter := r.c.meter()
	meter.proxyPids = append(meter.proxyPids, b.pid())
	for round := 1; round <= r.cfg.Rounds; round++ {
		for _, style := range WaitStyles {
			if ctx.Err() != nil {
				return
			}
			spec := waitSpec{style: style, addrs: [2]string{r.c.proxy.addr, b.addr}, pairs: r.cfg.WaitPairs, prefix: r.prefix(),
				warmup: r.cfg.Warmup, duration: r.cfg.Duration}
			res, err := runWaiters(ctx, spec, meter)
			if err != nil {
				r.fail("waiters %s: %v", style, err)
			}
			if res == nil {
				continue
			}
			res.Round = round
			r.res.Waiters = append(r.res.Waiters, *res)
			fmt.Fprintf(r.cfg.Log, "lockbench: %-15s %-9s round %d pairs=%d %6.0f hand-overs/s  from release reply p50 %v p99 %v; from release sent p50 %v p99 %v  "+
				"attempts/hand-over %.2f  hints %d spurious %d missed %d extra messages %d  errors %d %s  CPU %.0f µs/hand-over\n",
				ScenarioWaiters, style, round, res.Pairs, res.Throughput(), res.FromReply.Quantile(0.5).Round(time.Microsecond),
				res.FromReply.Quantile(0.99).Round(time.Microsecond), res.FromSent.Quantile(0.5).Round(time.Microsecond),
				res.FromSent.Quantile(0.99).Round(time.Microsecond), res.attemptsPer(), res.Hints, res.Spurious, res.Missed, res.Extra,
				res.Errors, res.FirstErr, res.cpuPer())
			if res.Handovers == 0 {
				r.fail("waiters %s round %d: no hand-over (first error: %s)", style, round, res.FirstErr)
			}
		}
	}
}
