package bench

import (
	"fmt"
	"io"
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
		ratios := res.proxyRatios(p, Lockproxy, Twemproxy)
		what := fmt.Sprintf("redis-benchmark -c %d -P %d, proxy CPU µs/request: lockproxy (%d masters, quorum) / twemproxy (1 master)",
			benchClients, p, res.Config.Masters)
		c := roundsCheck(what, ratios, proxyCPUGoal, false)
		if c.Measured() {
			c.Value += fmt.Sprintf("; lockproxy %s, twemproxy %s µs", medianAndRounds(res.redisBenchRuns(Lockproxy, p)),
				medianAndRounds(res.redisBenchRuns(Twemproxy, p)))
			if f, ok := res.fanOut(p); ok {
				c.Value += fmt.Sprintf("; lockproxy on 1 master %.2f µs, %.2f× twemproxy's: the rest comes with the other masters, %.2f µs per further master (1b)",
					f.one, f.oneRatio, f.perMaster)
			}
			c.Value += res.floorCheckText(p)
		}
		cs = append(cs, c)
	}
	return cs
}

// fanOutCost splits lockproxy's CPU per request at one depth into what the
// same job as twemproxy's costs it (lockproxy on one master) and what each
// further master adds; medians over the rounds, µs per request.
type fanOutCost struct {
	twem, one, all      float64 // twemproxy, lockproxy on 1 master, on all
	oneRatio            float64 // median of the rounds' lockproxy1 / twemproxy
	perMaster, pmUser   float64 // (all - one) / (masters - 1), and its user part
	pmSys, parityBudget float64 // its kernel part; what a further master may cost for all to match twemproxy
}

// fanOut returns the split at pipeline p; false unless all three were
// measured over several masters.
func (res *Results) fanOut(p int) (fanOutCost, bool) {
	n := res.Config.Masters
	twem, ok1 := res.medianFig(Twemproxy, p, (*RedisBenchResult).ProxyPerReq)
	one, ok2 := res.medianFig(LockproxyOne, p, (*RedisBenchResult).ProxyPerReq)
	all, ok3 := res.medianFig(Lockproxy, p, (*RedisBenchResult).ProxyPerReq)
	if !ok1 || !ok2 || !ok3 || n < 2 || twem <= 0 {
		return fanOutCost{}, false
	}
	user := func(r *RedisBenchResult) float64 { return perReq(r.CPU.Proxy-r.CPU.ProxySys, r.Requests) }
	sys := func(r *RedisBenchResult) float64 { return perReq(r.CPU.ProxySys, r.Requests) }
	u1, _ := res.medianFig(LockproxyOne, p, user)
	un, _ := res.medianFig(Lockproxy, p, user)
	s1, _ := res.medianFig(LockproxyOne, p, sys)
	sn, _ := res.medianFig(Lockproxy, p, sys)
	ratios := res.proxyRatios(p, LockproxyOne, Twemproxy)
	if len(ratios) == 0 {
		return fanOutCost{}, false // no round measured both: no ratio to give
	}
	further := float64(n - 1)
	return fanOutCost{twem: twem, one: one, all: all, oneRatio: median(ratios),
		perMaster: (all - one) / further, pmUser: (un - u1) / further, pmSys: (sn - s1) / further,
		parityBudget: (twem - one) / further}, true
}

// fanOutMarkdown writes the split of lockproxy's CPU per request into the
// job twemproxy does and the fan-out, when lockproxy1 was measured.
func (res *Results) fanOutMarkdown(w io.Writer) {
	n := res.Config.Masters
	var rows []string
	for _, p := range benchPipelines {
		if f, ok := res.fanOut(p); ok {
			rows = append(rows, fmt.Sprintf("| %d | %.2f | %.2f | %.2f× | %.2f | %.2f (user %.2f, kernel %.2f) | %.2f |", p, f.twem, f.one,
				f.oneRatio, f.all, f.perMaster, f.pmUser, f.pmSys, f.parityBudget))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n**Where the difference is.** lockproxy on one master does twemproxy's job with all of lockproxy's own work per "+
		"request: parsing and checking the command, the key queue, the vote, the deadline, the record kept for a late undo, the event "+
		"loop and the Go runtime. What lockproxy on %d masters costs beyond it comes with the other masters: for each, the command "+
		"copied into one more batch and written, one more reply read and parsed, and one more vote counted, and on a machine the "+
		"masters share, their load. Medians over the rounds, each figure on its own (user and kernel need not add up), "+
		"µs per request:\n\n| -P | twemproxy → 1 master | lockproxy → 1 master | lockproxy1 / twemproxy (median of rounds) | "+
		"lockproxy → %d masters | each further master | what each further master could cost for lockproxy → %d to match twemproxy |\n"+
		"|--:|--:|--:|--:|--:|--:|--:|\n%s\n", n, n, n, strings.Join(rows, "\n"))
}

// proxyRatios are, round by round at pipeline p, num's proxy CPU per
// request over den's.
func (res *Results) proxyRatios(p int, num, den Target) []float64 {
	is := func(t Target) func(RedisBenchResult) bool {
		return func(r RedisBenchResult) bool { return r.Target == t && r.Pipeline == p && r.CPU.Proxy >= 0 }
	}
	return roundRatios(res.RedisBench, func(r RedisBenchResult) int { return r.Round }, is(num), is(den),
		func(r RedisBenchResult) float64 { return r.ProxyPerReq() })
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
