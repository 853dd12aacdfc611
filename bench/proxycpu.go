package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Issue 12's performance target: lockproxy's own CPU per request at or below
// twemproxy's, at -P 1 and at -P 16 (scenario 1, judged on the median of
// the rounds' ratios), while lockproxy fans every request out to all the
// masters and decides a quorum and twemproxy forwards it to one.

// proxyCPUGoal is the largest lockproxy / twemproxy ratio of proxy CPU per
// request that meets the target.
const proxyCPUGoal = 1.0

// perReq returns d per request in microseconds.
func perReq(d time.Duration, requests int) float64 {
	if requests <= 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(requests)
}

// ProxyPerReq is the proxy's CPU per request in µs, -1 without a proxy.
func (r *RedisBenchResult) ProxyPerReq() float64 {
	if r.CPU.Proxy < 0 {
		return -1
	}
	return perReq(r.CPU.Proxy, r.Requests)
}

// redisBenchRuns returns the rounds of target t at pipeline p, in order.
func (res *Results) redisBenchRuns(t Target, p int) []*RedisBenchResult {
	var rs []*RedisBenchResult
	for i := range res.RedisBench {
		if r := &res.RedisBench[i]; r.Target == t && r.Pipeline == p {
			rs = append(rs, r)
		}
	}
	return rs
}

// proxyCPUChecks compares lockproxy's CPU per request with twemproxy's at
// each pipeline depth: the median of the rounds' ratios, with each round's
// ratio and each proxy's µs per request.
func (res *Results) proxyCPUChecks() []Check {
	var cs []Check
	for _, p := range benchPipelines {
		is := func(t Target) func(RedisBenchResult) bool {
			return func(r RedisBenchResult) bool { return r.Target == t && r.Pipeline == p && r.CPU.Proxy >= 0 }
		}
		ratios := roundRatios(res.RedisBench, func(r RedisBenchResult) int { return r.Round }, is(Lockproxy), is(Twemproxy),
			func(r RedisBenchResult) float64 { return r.ProxyPerReq() })
		what := fmt.Sprintf("redis-benchmark -c %d -P %d, proxy CPU µs/request: lockproxy (%d masters, quorum) / twemproxy (1 master)",
			benchClients, p, res.Config.Masters)
		c := roundsCheck(what, ratios, proxyCPUGoal, false)
		if c.Measured() {
			c.Value += fmt.Sprintf("; lockproxy %s, twemproxy %s µs", medianAndRounds(res.redisBenchRuns(Lockproxy, p)),
				medianAndRounds(res.redisBenchRuns(Twemproxy, p)))
		}
		cs = append(cs, c)
	}
	return cs
}

// medianAndRounds formats the median proxy CPU per request of rs and every
// round's.
func medianAndRounds(rs []*RedisBenchResult) string {
	var v []float64
	for _, r := range rs {
		if r.CPU.Proxy >= 0 {
			v = append(v, r.ProxyPerReq())
		}
	}
	if len(v) == 0 {
		return "–"
	}
	each := make([]string, len(v))
	for i, x := range v {
		each[i] = fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.2f (%s)", median(v), strings.Join(each, ", "))
}

// median of v (the mean of the middle two of an even count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// redisBenchExtra returns the extra testing.B metrics of a scenario 1 run
// through a proxy: its CPU, user and system, and system calls per request,
// and the masters' CPU per request.
func redisBenchExtra(r RedisBenchResult) string {
	if r.CPU.Proxy < 0 || r.Requests <= 0 {
		return fmt.Sprintf("\t%.0f masters-cpu-ns/op", 1000*perReq(r.CPU.MastersTotal(), r.Requests))
	}
	return fmt.Sprintf("\t%.0f proxy-cpu-ns/op\t%.0f proxy-user-ns/op\t%.0f proxy-sys-ns/op\t%.3f proxy-syscalls/op\t%.0f masters-cpu-ns/op",
		1000*r.ProxyPerReq(), 1000*perReq(r.CPU.Proxy-r.CPU.ProxySys, r.Requests), 1000*perReq(r.CPU.ProxySys, r.Requests),
		float64(r.CPU.ProxyIO.Total())/float64(r.Requests), 1000*perReq(r.CPU.MastersTotal(), r.Requests))
}
