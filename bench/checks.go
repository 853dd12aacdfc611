package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Check is one of the targets of issues 3, 11, 12 and 14, evaluated on a run.
type Check struct {
	What string // what is compared
	Goal string // the target, e.g. "≥ 0.50×"
	// Value is the measured figure, "" when the run lacks a side of it.
	Value string
	Pass  bool
	// Info marks a comparison shown for context, not judged.
	Info bool
}

// Measured reports whether the run had both sides of the comparison.
func (c Check) Measured() bool { return c.Value != "" }

// Mark is ✅ or ❌, or "–" when not measured.
func (c Check) Mark() string {
	switch {
	case !c.Measured():
		return "–"
	case c.Info:
		return "info"
	case c.Pass:
		return "✅"
	}
	return "❌"
}

// ratioCheck compares num/den with goal: at least goal when atLeast, else at
// most goal.
func ratioCheck(what string, num, den float64, goal float64, atLeast bool, measured bool) Check {
	c := Check{What: what}
	if atLeast {
		c.Goal = fmt.Sprintf("≥ %.2f×", goal)
	} else {
		c.Goal = fmt.Sprintf("≤ %.2f×", goal)
	}
	if !measured || den == 0 {
		return c
	}
	r := num / den
	c.Value = fmt.Sprintf("%.2f×", r)
	if atLeast {
		c.Pass = r >= goal
	} else {
		c.Pass = r <= goal
	}
	return c
}

// roundsCheck judges the median of per-round ratios against goal, and
// shows every round's.
func roundsCheck(what string, ratios []float64, goal float64, atLeast bool) Check {
	if len(ratios) == 0 {
		return ratioCheck(what, 0, 0, goal, atLeast, false)
	}
	s := slices.Clone(ratios)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	c := ratioCheck(what, med, 1, goal, atLeast, true)
	if len(ratios) > 1 {
		each := make([]string, len(ratios))
		for i, r := range ratios {
			each[i] = fmt.Sprintf("%.2f", r)
		}
		c.Value += fmt.Sprintf(" (median of %d rounds: %s)", len(ratios), strings.Join(each, ", "))
	}
	return c
}

// roundRatios pairs the runs of two targets by round and returns
// num(a)/den(b) for every round that has both, in round order.
func roundRatios[T any](rs []T, round func(T) int, isNum, isDen func(T) bool, fig func(T) float64) []float64 {
	nums, dens := map[int]float64{}, map[int]float64{}
	var rounds []int
	for _, r := range rs {
		switch {
		case isNum(r):
			nums[round(r)] = fig(r)
			rounds = append(rounds, round(r))
		case isDen(r):
			dens[round(r)] = fig(r)
		}
	}
	var out []float64
	for _, k := range rounds {
		if d, ok := dens[k]; ok && d > 0 {
			out = append(out, nums[k]/d)
		}
	}
	return out
}

// Checks evaluates the targets of issues 3, 11, 12 and 14 on res. The comparisons of
// scenarios 1 and 2 are the median of their rounds' ratios.
func (res *Results) Checks() []Check {
	var cs []Check
	for _, p := range []struct {
		pipeline int
		goal     float64
	}{{1, 0.5}, {16, 0.25}} {
		is := func(t Target) func(RedisBenchResult) bool {
			return func(r RedisBenchResult) bool { return r.Target == t && r.Pipeline == p.pipeline }
		}
		ratios := roundRatios(res.RedisBench, func(r RedisBenchResult) int { return r.Round }, is(Lockproxy), is(Direct),
			func(r RedisBenchResult) float64 { return r.RPS })
		cs = append(cs, roundsCheck(fmt.Sprintf("redis-benchmark -c 50 -P %d req/s: lockproxy / direct", p.pipeline), ratios, p.goal, true))
	}
	if res.Config.measuresTwemproxy() {
		cs = append(cs, res.proxyCPUChecks()...)
	}

	w := slices.Max(res.Config.Workers)
	is := func(t Target) func(LoadResult) bool {
		return func(r LoadResult) bool { return r.Target == t && r.Workers == w && r.Variant == "" }
	}
	round := func(r LoadResult) int { return r.Round }
	pairs := roundRatios(res.AcquireRelease, round, is(Lockproxy), is(Redsync), func(r LoadResult) float64 { return r.Throughput() })
	p99s := roundRatios(res.AcquireRelease, round, is(Lockproxy), is(Redsync), func(r LoadResult) float64 { return float64(r.Lat.Quantile(0.99)) })
	cs = append(cs,
		roundsCheck(fmt.Sprintf("acquire+release, %d workers, pairs/s: lockproxy / redsync", w), pairs, 5, true),
		roundsCheck(fmt.Sprintf("acquire+release, %d workers, p99 acquire: lockproxy / redsync", w), p99s, 0.5, false))

	hw := res.Config.HotWorkers
	hlp := res.find(ScenarioHotKey, Lockproxy, hw)
	for _, v := range []string{"", RedsyncDefaultRetry} {
		hrs := res.findVariant(ScenarioHotKey, Redsync, v, hw)
		var hlpT, hrsT float64
		if hlp != nil && hrs != nil {
			hlpT, hrsT = hlp.Throughput(), hrs.Throughput()
		}
		what := fmt.Sprintf("hot key, %d workers, acquisitions/s: lockproxy / redsync (same retry backoff)", hw)
		if v != "" {
			what = fmt.Sprintf("hot key, %d workers, acquisitions/s: lockproxy / redsync (%s)", hw, v)
		}
		c := ratioCheck(what, hlpT, hrsT, 3, true, hlp != nil && hrs != nil)
		// The target is about the protocol, so it is judged with
		// both clients retrying alike; redsync's default policy (sleeping
		// 50-250ms) is shown for information: with a 1ms hold no client
		// can exceed ~1000/s, so 3x of it may be out of anyone's reach.
		c.Info = v != ""
		cs = append(cs, c)
	}

	deg, base := res.Degraded, res.DegradedBase
	var degT, baseT float64
	if deg != nil && base != nil {
		degT, baseT = deg.Throughput(), base.Throughput()
	}
	paused := fmt.Sprintf("1 of %d masters paused", res.Config.Masters)
	cs = append(cs, ratioCheck(paused+", pairs/s: paused / unpaused", degT, baseT, 0.7, true, deg != nil && base != nil))
	p99 := Check{What: paused + ", p99 acquire", Goal: "< " + res.Config.NodeTimeout.String() + " (node_timeout)"}
	if deg != nil && deg.Ops > 0 {
		d := deg.Lat.Quantile(0.99)
		p99.Value, p99.Pass = fmtMs(d)+" ms", d < res.Config.NodeTimeout
	}
	cs = append(append(cs, p99), res.multiProxyChecks()...)
	return append(cs, res.waitersChecks()...)
}

// fmtMs formats d in milliseconds with about three significant digits.
func fmtMs(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2f", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}
