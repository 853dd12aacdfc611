package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// RedsyncDefaultRetry is the Variant of the hot-key run of redsync with its
// default retry policy.
const RedsyncDefaultRetry = "default retry"

// Scenario names, for Config.Scenarios and the -only flag.
const (
	ScenarioRedisBenchmark = "redis-benchmark"
	// ScenarioTwemproxy adds twemproxy to scenario 1's rounds (and runs
	// scenario 1 when it is not selected itself): the proxies' own CPU
	// per request, twemproxy forwarding to one master against lockproxy
	// deciding a quorum of all of them (proxycpu.go).
	ScenarioTwemproxy      = "twemproxy"
	ScenarioAcquireRelease = "acquire-release"
	ScenarioHotKey         = "hotkey"
	ScenarioDegraded       = "degraded"
	ScenarioMultiProxy     = "multiproxy"
	ScenarioWaiters        = "waiters"
)

// AllScenarios lists the scenarios in the order Run runs them. Degraded and
// multiproxy come last: they pause a master, which may leave lockproxy's
// view of it changed.
var AllScenarios = []string{ScenarioRedisBenchmark, ScenarioTwemproxy, ScenarioAcquireRelease, ScenarioHotKey, ScenarioWaiters,
	ScenarioDegraded, ScenarioMultiProxy}

// Config says what Run measures. The zero value of every field means its
// documented default.
type Config struct {
	// Masters is the number of redis masters. Default 5.
	Masters int
	// Duration is the recorded length of each run. Default 5s.
	Duration time.Duration
	// Warmup precedes each Go workload run without being recorded (dials,
	// script loads). Default Duration/5, at most 1s.
	Warmup time.Duration
	// Workers are the worker counts of the acquire-release scenario.
	// Default 16 and 64. The degraded scenario uses the largest.
	Workers []int
	// Rounds repeats scenarios 1, 2, 5 and 6, every target (variant) once per
	// round, one right after the other, and the targets are judged on
	// their median over the rounds: on this shared 2-core machine one run
	// of each swings by ±10%. Default 3.
	Rounds int
	// HotWorkers is the number of workers on the hot key. Default 64.
	HotWorkers int
	// Keys is the random key space of acquire-release and redis-benchmark.
	// Default 100000.
	Keys int
	// MultiProxies is the largest number of lockproxies of the multiproxy
	// scenario: it runs with 1 to MultiProxies, then 1 and MultiProxies
	// with one master paused. Default 3.
	MultiProxies int
	// MultiWorkers and MultiKeys are the workers of the multiproxy
	// scenario, spread evenly over the proxies, and the keys they contend
	// on. Default 32 and 2.
	MultiWorkers, MultiKeys int
	// MultiProxyNoMonitor turns off the recording of the masters' MONITOR
	// streams during the multiproxy runs, which gives the exact
	// refused-while-free figure (truth.go) at some CPU cost to the
	// masters; without it the report judges the estimate from the
	// workers' clock (refused.go).
	MultiProxyNoMonitor bool
	// WaitPairs is the number of client pairs of the waiters scenario,
	// each passing its own lock between the two proxies. Default 8.
	WaitPairs int
	// Scenarios selects scenarios by name; empty means AllScenarios.
	Scenarios []string
	// Targets selects targets; empty means AllTargets. Without Lockproxy,
	// no lockproxy is built or started and degraded is skipped. Twemproxy
	// runs only in scenario 1 with the twemproxy scenario selected, and
	// then needs nutcracker installed.
	Targets []Target
	// NoProxyProfile turns off the extra runs of the twemproxy
	// scenario that count each proxy's system calls and sample where its
	// CPU goes with perf (profile.go).
	NoProxyProfile bool
	// LockproxyBin is a lockproxy binary to run; empty builds ./cmd/lockproxy
	// of the module in the current directory.
	LockproxyBin string
	// FloorBin, when set, is a program that serves the floor fan-out proxy
	// (bench/floor) when run with -serve-floor ADDR -floor-masters LIST;
	// scenario 1 then measures it beside twemproxy and lockproxy
	// (lockbench passes itself).
	FloorBin string
	// NodeTimeout is lockproxy's node_timeout, also the degraded p99
	// bound. Default 50ms.
	NodeTimeout time.Duration
	// Dir holds the masters' and lockproxy's directories and logs; empty
	// means a temporary directory removed when Run returns.
	Dir string
	// Log receives one progress line per run; nil discards them.
	Log io.Writer
}

func (c Config) withDefaults() Config {
	if c.Masters <= 0 {
		c.Masters = 5
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Warmup <= 0 {
		c.Warmup = min(time.Second, c.Duration/5)
	}
	if len(c.Workers) == 0 {
		c.Workers = []int{16, 64}
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.HotWorkers <= 0 {
		c.HotWorkers = 64
	}
	if c.Keys <= 0 {
		c.Keys = 100000
	}
	if c.MultiProxies <= 0 {
		c.MultiProxies = 3
	}
	if c.MultiWorkers <= 0 {
		c.MultiWorkers = 32
	}
	if c.MultiKeys <= 0 {
		c.MultiKeys = 2
	}
	if c.WaitPairs <= 0 {
		c.WaitPairs = 8
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = AllScenarios
	}
	if len(c.Targets) == 0 {
		c.Targets = AllTargets
	}
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = 50 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

func (c Config) has(scenario string) bool { return slices.Contains(c.Scenarios, scenario) }
func (c Config) uses(t Target) bool       { return slices.Contains(c.Targets, t) }

// measuresTwemproxy reports whether scenario 1 runs twemproxy.
func (c Config) measuresTwemproxy() bool { return c.uses(Twemproxy) && c.has(ScenarioTwemproxy) }

// loadTargets are the targets of the Go workload scenarios: every selected
// one but twemproxy.
func (c Config) loadTargets() []Target {
	return slices.DeleteFunc(slices.Clone(c.Targets), func(t Target) bool { return t == Twemproxy })
}

// Results is everything one Run measured.
type Results struct {
	Config  Config
	Machine Machine
	// RedisBench holds scenario 1, AcquireRelease scenario 2, HotKey
	// scenario 3.
	RedisBench     []RedisBenchResult
	AcquireRelease []LoadResult
	HotKey         []LoadResult
	// Degraded is scenario 4 (nil when not run) and DegradedBase the
	// unpaused figure it is compared with.
	Degraded, DegradedBase *LoadResult
	// Profiles are the proxies' system call counts and CPU profiles of
	// scenario 1 (profile.go), when twemproxy was measured.
	Profiles []ProxyProfile
	// MultiProxy holds scenario 5, every round.
	MultiProxy []MultiProxyResult
	// Waiters holds scenario 6, every round.
	Waiters []WaitersResult
	// Errors are the failures of single runs; the other runs went on.
	Errors []string
}

// Run starts the masters (and lockproxy), runs the selected scenarios one
// after the other, stops every process it started and returns what it
// measured. A failed run is recorded in Results.Errors and the others still
// run; the error is non-nil only when nothing could be measured.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg = cfg.withDefaults()
	for _, s := range cfg.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			return nil, fmt.Errorf("bench: unknown scenario %q (have %v)", s, AllScenarios)
		}
	}
	for _, t := range cfg.Targets {
		if !slices.Contains(AllTargets, t) {
			return nil, fmt.Errorf("bench: unknown target %q (have %v)", t, AllTargets)
		}
	}
	dir := cfg.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "lockbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	res := &Results{Config: cfg, Machine: probeMachine(ctx)}

	twemBin := ""
	if cfg.measuresTwemproxy() {
		b, err := NutcrackerBinary()
		if err != nil {
			return nil, err
		}
		twemBin = b
	}
	bin := ""
	if cfg.uses(Lockproxy) {
		bin = cfg.LockproxyBin
		if bin == "" {
			fmt.Fprintln(cfg.Log, "lockbench: building ./cmd/lockproxy")
			b, err := BuildLockproxy(ctx, dir)
			if err != nil {
				return nil, err
			}
			bin = b
		}
	}
	c, err := startCluster(ctx, dir, cfg.Masters, bin, cfg.NodeTimeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if twemBin != "" {
		if err := c.startTwemproxy(ctx, twemBin); err != nil {
			return nil, err
		}
		if cfg.uses(Lockproxy) {
			if err := c.startLockproxyOne(ctx); err != nil {
				return nil, err
			}
			if cfg.FloorBin != "" {
				if err := c.startFloor(ctx, cfg.FloorBin); err != nil {
					return nil, err
				}
			}
		}
	}
	r := &runner{cfg: cfg, c: c, meter: c.meter(), res: res}
	scenario1 := false
	for _, s := range AllScenarios {
		if !cfg.has(s) || ctx.Err() != nil {
			continue
		}
		switch s {
		case ScenarioRedisBenchmark, ScenarioTwemproxy:
			// One set of rounds for both: twemproxy runs beside the
			// others, never on its own.
			if !scenario1 {
				r.redisBenchmark(ctx)
				scenario1 = true
			}
		case ScenarioAcquireRelease:
			r.acquireRelease(ctx)
		case ScenarioHotKey:
			r.hotKey(ctx)
		case ScenarioDegraded:
			r.degraded(ctx)
		case ScenarioMultiProxy:
			r.multiProxy(ctx)
		case ScenarioWaiters:
			r.waiters(ctx)
		}
	}
	if err := ctx.Err(); err != nil {
		res.Errors = append(res.Errors, "interrupted: the last run was cut short, later ones did not run")
		return res, fmt.Errorf("bench: interrupted: %w", err)
	}
	return res, nil
}

// find returns the result of a Go workload scenario, nil when not run.
func (res *Results) find(scenario string, t Target, workers int) *LoadResult {
	var rs []LoadResult
	switch scenario {
	case ScenarioAcquireRelease:
		rs = res.AcquireRelease
	case ScenarioHotKey:
		rs = res.HotKey
	case ScenarioDegraded:
		if res.Degraded != nil && workers == res.Degraded.Workers {
			return res.Degraded
		}
		return nil
	}
	var found []*LoadResult
	for i := range rs {
		if rs[i].Target == t && rs[i].Workers == workers && rs[i].Variant == "" {
			found = append(found, &rs[i])
		}
	}
	return medianOf(found, (*LoadResult).Throughput)
}

// medianOf returns the round with the median figure (the lower middle one
// of an even count), nil for none.
func medianOf[T any](rs []*T, figure func(*T) float64) *T {
	if len(rs) == 0 {
		return nil
	}
	s := slices.Clone(rs)
	slices.SortStableFunc(s, func(a, b *T) int { return cmp.Compare(figure(a), figure(b)) })
	return s[(len(s)-1)/2]
}

// findVariant is find for a Variant other than the main one.
func (res *Results) findVariant(scenario string, t Target, variant string, workers int) *LoadResult {
	if scenario != ScenarioHotKey {
		return nil
	}
	for i := range res.HotKey {
		r := &res.HotKey[i]
		if r.Target == t && r.Workers == workers && r.Variant == variant {
			return r
		}
	}
	return nil
}

// findRedisBench returns the redis-benchmark run of t with pipeline p (the
// median round).
func (res *Results) findRedisBench(t Target, p int) *RedisBenchResult {
	var found []*RedisBenchResult
	for i := range res.RedisBench {
		if res.RedisBench[i].Target == t && res.RedisBench[i].Pipeline == p {
			found = append(found, &res.RedisBench[i])
		}
	}
	return medianOf(found, func(r *RedisBenchResult) float64 { return r.RPS })
}

// Err joins the errors of the failed runs, nil when every run worked.
func (res *Results) Err() error {
	errs := make([]error, len(res.Errors))
	for i, e := range res.Errors {
		errs[i] = errors.New(e)
	}
	return errors.Join(errs...)
}
