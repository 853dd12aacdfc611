package bench

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// refusedFreeGoal is issue 11's target: under 1% of refused attempts
// refused while the key was free, with 3 proxies, also with a master
// paused.
const refusedFreeGoal = 0.01

// Judged is the refused-while-free share the targets judge: the masters'
// truth when the run recorded it, else the estimate.
func (r *MultiProxyResult) Judged() float64 {
	if r.Truth {
		return r.TruthShare()
	}
	return r.EstimateShare()
}

// multiProxyRuns returns the rounds of one variant, in round order.
func (res *Results) multiProxyRuns(proxies int, paused bool) []*MultiProxyResult {
	var rs []*MultiProxyResult
	for i := range res.MultiProxy {
		if r := &res.MultiProxy[i]; r.Proxies == proxies && r.Paused == paused {
			rs = append(rs, r)
		}
	}
	return rs
}

// multiProxyChecks judges refused-while-free on the median round of the
// largest number of proxies, unpaused and with a master paused, and shows
// the one-proxy control.
func (res *Results) multiProxyChecks() []Check {
	cfg := res.Config
	var cs []Check
	for _, v := range []struct {
		proxies int
		paused  bool
	}{{1, false}, {cfg.MultiProxies, false}, {1, true}, {cfg.MultiProxies, true}} {
		what := fmt.Sprintf("%d lockproxies, %d workers on %d keys: refused while free / refused", v.proxies, cfg.MultiWorkers, cfg.MultiKeys)
		c := Check{What: what, Goal: fmt.Sprintf("< %g%%", 100*refusedFreeGoal)}
		if v.proxies == 1 {
			// One proxy splits no vote: what it shows is the measure's
			// own error, or stale keys of a master slower than
			// node_timeout.
			c.What = fmt.Sprintf("1 lockproxy (control), %d workers on %d keys: refused while free / refused", cfg.MultiWorkers, cfg.MultiKeys)
			c.Goal, c.Info = "0", true
		}
		if v.paused {
			c.What += ", 1 master paused"
		}
		rs := res.multiProxyRuns(v.proxies, v.paused)
		if len(rs) == 0 {
			cs = append(cs, c)
			continue
		}
		med := medianOf(rs, (*MultiProxyResult).Judged)
		c.Value, c.Pass = fmtPct(med.Judged()), med.Judged() < refusedFreeGoal
		if !med.Truth {
			c.Value += " (estimate)"
		}
		if len(rs) > 1 {
			each := make([]string, len(rs))
			for i, r := range rs {
				each[i] = fmtPct(r.Judged())
			}
			c.Value += fmt.Sprintf(" (median of %d rounds: %s)", len(rs), strings.Join(each, ", "))
		}
		cs = append(cs, c)
	}
	return cs
}

// fmtPct formats a fraction as a percentage with three decimals.
func fmtPct(f float64) string { return fmt.Sprintf("%.3f%%", 100*f) }

// multiProxyMarkdown writes scenario 5's section of the report.
func (res *Results) multiProxyMarkdown(w io.Writer) {
	if len(res.MultiProxy) == 0 {
		return
	}
	cfg := res.Config
	fmt.Fprintf(w, "\n## 5. Several lockproxies on one master set\n\n"+
		"1 to %d lockproxy processes on the same %d masters (the extra ones configured like the first), %d go-redis workers spread evenly over them "+
		"(worker w uses proxy w mod n), contending on %d keys: pick a key, `SET key token NX PX 10000` until +OK (0.5–1.5 ms between attempts), "+
		"hold %v, release with the compare-and-delete script; then 1 and %d proxies again with the last master stopped by SIGSTOP for the whole run "+
		"(resumed, and every proxy's backlog to it answered, before the next run). "+
		"Each variant runs once per round, %d rounds; the targets are judged on the median round. Latency is from the first attempt to +OK.\n\n",
		cfg.MultiProxies, cfg.Masters, cfg.MultiWorkers, cfg.MultiKeys, contentionHold, cfg.MultiProxies, cfg.Rounds)
	fmt.Fprintf(w, "**Refused while free.** A lock is held from the moment its token is on a quorum of masters until a quorum no longer has it. "+
		"A refused attempt (nil reply), the interval [SET NX sent, nil read] on the benchmark's clock, was *refused while free* when no hold of its key "+
		"met it at any moment: nobody held the lock while this client was told it was held (a split vote: every contender got a minority and undid it). "+
		"The figure is that count over the refused attempts sent and answered in the counted window. Holds are read from the masters themselves: "+
		"every master's MONITOR stream is recorded during the run, and replaying each master's SET NX and DEL in order (MONITOR stamps each with the "+
		"master's clock, which is this machine's) gives when each token was on a quorum. The replay checks itself: every +OK a worker read must show as "+
		"its token reaching a quorum between the SET NX being sent and the +OK being read (*unbacked* counts those that do not: 0); "+
		"*cut short* counts holds whose token fell below a quorum before the holder sent its release (0: a stranger could otherwise get the lock). "+
		"MONITOR costs the masters CPU (masters' column). Without it (`lockbench -monitor=false`) the figure is estimated from the workers' clock, "+
		"each hold from the middle of its SET NX's round trip to the middle of its release's; the bounds count a hold only from +OK read to release sent "+
		"(upper: too many refusals, never too few) or from SET NX sent to release answered (lower: too few, never too many). "+
		"With 1 proxy, which queues the attempts on a key one behind the other and so splits no vote, the figure must be 0: the measure's control. "+
		"It is not 0 when a master misses node_timeout (NOQUORUM in the errors): lockproxy then leaves keys on single masters "+
		"until their TTL, which refuse later attempts while no quorum holds the key.\n\n")
	fmt.Fprintf(w, "| proxies | master paused | round | load | acquisitions/s | p50 | p99 | attempts | refused | refused while free | estimate | bounds | unbacked / cut short | errors |%s\n"+
		"|--:|:-:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|%s\n", cpuColumnsHead, cpuColumnsRule)
	var notes []string
	truth := false
	for i := range res.MultiProxy {
		r := &res.MultiProxy[i]
		truth = truth || r.Truth
		exact, unbacked := "–", "–"
		if r.Truth {
			exact, unbacked = fmt.Sprintf("%d (%s)", r.TruthFree, fmtPct(r.TruthShare())), fmt.Sprintf("%d / %d", r.Unbacked, r.CutShort)
		}
		fmt.Fprintf(w, "| %d | %s | %d | %s | %.0f | %s | %s | %d | %d | %s | %d (%s) | %s – %s | %s | %d |%s\n", r.Proxies, yesNo(r.Paused), r.Round,
			fmtLoad(r.Load), r.Throughput(), fmtMs(r.Lat.Quantile(0.5)), fmtMs(r.Lat.Quantile(0.99)), r.Attempts, r.Refused, exact,
			r.Free[Estimate], fmtPct(r.EstimateShare()), fmtPct(r.FreeShare(Lower)), fmtPct(r.FreeShare(Upper)), unbacked, r.Errors,
			cpuCells(r.CPU, float64(r.Acquisitions)))
		if r.FirstErr != "" {
			notes = append(notes, fmt.Sprintf("First error of %s round %d: `%s`", r.variant(), r.Round, strings.ReplaceAll(r.FirstErr, "\n", " ")))
		}
	}
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	fmt.Fprintf(w, "\nCPU µs/op is per acquisition; lockproxy CPU is the sum over the proxies in use. Load is the machine's 1-minute load "+
		"average at the run's end, this benchmark's processes included.\n")
	if truth {
		res.causesTable(w)
		res.measuresTable(w)
	}
}

// causesTable writes why the refusals while free came (why.go) and the
// proxies' counters.
func (res *Results) causesTable(w io.Writer) {
	fmt.Fprintf(w, "\n**Why.** What the masters held when each refusal while free was sent, and whose attempts those tokens were: "+
		"*split*: contenders' attempts being decided, each on a minority of the masters until undone (about a round trip); "+
		"*slow*: one of them had waited node_timeout (%v) or more, for a master that does not answer, and kept its masters meanwhile; "+
		"*left over*: a master held a token whose undo was never sent (`undo_unconfirmed` in lockproxy's INFO), which refuses every attempt "+
		"there until its owner gets the lock and releases it, or its TTL (%v): from the moment its own client's SET NX reached that master "+
		"again (*re-sent*: a retry with the same token; lockproxy does not undo a late write once a later write of the same token went to "+
		"that master), or once it stayed %v. *No quorum*: of the left-over ones, those sent while fewer than a quorum of masters were free "+
		"of left-over tokens and not paused: nobody could get the lock. The proxies' counters are over the whole run, warm-up included.\n\n",
		res.Config.NodeTimeout, lockTTL, leftoverAge)
	fmt.Fprintf(w, "| proxies | master paused | round | refused while free | split | slow | left over | no quorum | median nil wait | "+
		"left-over tokens (re-sent) | split-vote retries | undos sent | undos unconfirmed |\n|--:|:-:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i := range res.MultiProxy {
		r := &res.MultiProxy[i]
		if !r.Truth {
			continue
		}
		fmt.Fprintf(w, "| %d | %s | %d | %d | %d | %d | %d | %d | %s | %d (%d) | %d | %d | %d |\n", r.Proxies, yesNo(r.Paused), r.Round, r.TruthFree,
			r.Why[CauseSplit], r.Why[CauseSlow], r.Why[CauseLeftover], r.Unreachable, fmtMs(r.FreeWait), r.Leftovers, r.LeftoversResent,
			r.Stats.SplitRetries, r.Stats.UndoSent, r.Stats.UndoUnconfirmed)
	}
}

// measuresTable writes how far each measure from the workers' clock is from
// the masters' truth.
func (res *Results) measuresTable(w io.Writer) {
	fmt.Fprintf(w, "\nHow far the measures from the workers' clock are from the masters' record: each cell is the measure's count, "+
		"then how many of those the record does not count (+) and how many it counts that the measure missed (−).\n\n")
	fmt.Fprintf(w, "| proxies | master paused | round | refused while free | estimate | upper bound | lower bound |\n|--:|:-:|--:|--:|--:|--:|--:|\n")
	for i := range res.MultiProxy {
		r := &res.MultiProxy[i]
		if !r.Truth {
			continue
		}
		cell := func(m Measure) string { return fmt.Sprintf("%d (+%d −%d)", r.Free[m], r.TooMany[m], r.TooFew[m]) }
		fmt.Fprintf(w, "| %d | %s | %d | %d | %s | %s | %s |\n", r.Proxies, yesNo(r.Paused), r.Round, r.TruthFree,
			cell(Estimate), cell(Upper), cell(Lower))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// multiProxyBenchLines writes every run of scenario 5 as a testing.B line
// with the refusal figures as extra metrics (percentages of the refused
// attempts; refused-free is the judged one).
func (res *Results) multiProxyBenchLines(w io.Writer) {
	for i := range res.MultiProxy {
		r := &res.MultiProxy[i]
		if r.Attempts <= 0 {
			continue
		}
		// A run without acquisitions (every vote split) keeps its line,
		// without the per-acquisition figures.
		var perOp string
		if r.Acquisitions > 0 {
			q := r.Lat.Summary()
			perOp = fmt.Sprintf("\t%.0f ns/op\t%d p50-ns\t%d p99-ns\t%.0f cpu-ns/op", float64(time.Second)/r.Throughput(),
				q.P50.Nanoseconds(), q.P99.Nanoseconds(), float64(r.CPU.Total())/float64(r.Acquisitions))
		}
		fmt.Fprintf(w, "%s/%s/%s/workers=%d/keys=%d-%d\t%d\t%.0f ops/s%s\t%.4f refused-free-%%\t%.4f refused-free-estimate-%%\t%.4f refused-%%\n",
			benchTarget(Lockproxy), ScenarioMultiProxy, r.variant(), r.Workers, r.Keys, runtime.GOMAXPROCS(0),
			r.Acquisitions, r.Throughput(), perOp, 100*r.Judged(), 100*r.EstimateShare(), 100*share(r.Refused, r.Attempts))
	}
}
