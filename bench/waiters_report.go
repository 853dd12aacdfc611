package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// styleLabel says what a WaitStyle is, for the report.
func styleLabel(s WaitStyle) string {
	switch s {
	case WaitPubSub:
		return "pub/sub (Redisson 4)"
	case WaitBLPOP:
		return "BLPOP (python-redis-lock)"
	case WaitPoll:
		return "polling every 50 ms"
	}
	return string(s)
}

// attemptsPer is the waiters' acquisition attempts per hand-over.
func (r *WaitersResult) attemptsPer() float64 { return perOp(float64(r.Attempts), r.Handovers) }

// cpuPer is the CPU of every measured process per hand-over, in µs.
func (r *WaitersResult) cpuPer() float64 {
	return perOp(float64(r.CPU.Total())/float64(time.Microsecond), r.Handovers)
}

func perOp(x float64, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return x / float64(n)
}

// waitersRuns returns the rounds of one style, in round order.
func (res *Results) waitersRuns(s WaitStyle) []*WaitersResult {
	var rs []*WaitersResult
	for i := range res.Waiters {
		if r := &res.Waiters[i]; r.Style == s && r.Handovers > 0 {
			rs = append(rs, r)
		}
	}
	return rs
}

// medianOver is the median of figure over rs (the mean of the middle two
// of an even count); 0 for none.
func medianOver(rs []*WaitersResult, figure func(*WaitersResult) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = figure(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// quantileMs returns a figure reading quantile q of a run's latencies, in
// milliseconds.
func quantileMs(lat func(*WaitersResult) Latencies, q float64) func(*WaitersResult) float64 {
	return func(r *WaitersResult) float64 { return float64(lat(r).Quantile(q)) / float64(time.Millisecond) }
}

func fromReply(r *WaitersResult) Latencies { return r.FromReply }
func fromSent(r *WaitersResult) Latencies  { return r.FromSent }

// waitersChecks judges issue 14's "woken once each" on every round of the
// styles that wake (pub/sub and BLPOP), and shows each style's median
// latency.
func (res *Results) waitersChecks() []Check {
	once := Check{What: "waiters on one lockproxy, releases through the other (pub/sub and BLPOP, every round): wake-ups missed / duplicated",
		Goal: "0 / 0"}
	var waits, missed, extra int64
	for _, s := range []WaitStyle{WaitPubSub, WaitBLPOP} {
		for _, r := range res.waitersRuns(s) {
			waits += r.Waits
			missed += r.Missed
			extra += r.Extra
		}
	}
	if waits > 0 {
		once.Value = fmt.Sprintf("%d / %d of %d waits", missed, extra, waits)
		once.Pass = missed == 0 && extra == 0
	}
	lat := Check{What: "release → waiter's acquisition, p50 / p99 from the release's sending: " +
		strings.Join(mapStyles(styleLabel), " · "), Goal: "against polling", Info: true}
	var cells []string
	for _, s := range WaitStyles {
		rs := res.waitersRuns(s)
		if len(rs) == 0 {
			cells = nil
			break
		}
		cells = append(cells, fmt.Sprintf("%s / %s ms", fmtMsF(medianOver(rs, quantileMs(fromSent, 0.5))),
			fmtMsF(medianOver(rs, quantileMs(fromSent, 0.99)))))
	}
	lat.Value = strings.Join(cells, " · ")
	return []Check{once, lat}
}

func mapStyles(f func(WaitStyle) string) []string {
	out := make([]string, len(WaitStyles))
	for i, s := range WaitStyles {
		out[i] = f(s)
	}
	return out
}

// fmtMsF is fmtMs of a figure already in milliseconds.
func fmtMsF(ms float64) string { return fmtMs(time.Duration(ms * float64(time.Millisecond))) }

// waitersMarkdown writes scenario 6's section of the report.
func (res *Results) waitersMarkdown(w io.Writer) {
	if len(res.Waiters) == 0 {
		return
	}
	cfg := res.Config
	fmt.Fprintf(w, "\n## 6. Waiting for a lock: release → the waiter's acquisition\n\n"+
		"Two lockproxies on the same %d masters. %d pairs of clients, one client of each pair on each proxy, pass one lock per pair back and forth: "+
		"the waiter tries, is refused, gets ready to be woken; then the holder keeps the lock %v plus a random 0–%v more (so a release falls "+
		"at a random moment of a poller's cycle), releases it, and the waiter takes it and becomes the holder. Releases so go through both proxies "+
		"in turn, each with one waiter. Styles, with the libraries' own scripts: **%s**: tryLockInner; refused, SUBSCRIBE to the lock's channel, "+
		"try again, wait for a message, try; unlockInner with `publish` PUBLISHes on every master, each proxy delivers it once; "+
		"**%s**: SET NX EX; refused, BLPOP the signal list, try; the unlock script pushes the signal on every master; "+
		"**%s**: SET NX PX every 50 ms. A wait gives up after %v (counted *missed*). "+
		"Latency is from the holder's release to the waiter's acquisition reply on the benchmark's clock: from the release's **reply** (what the "+
		"releasing application sees: it may be slightly negative, when the waiter hears of the release before the holder has read its reply) and "+
		"from its **sending**. Each style runs once per round, %d rounds, back to back; the first table gives the median of the rounds of each "+
		"figure. *Hints* are the messages read or signals popped, *spurious* the hints after which the attempt was refused, *extra messages* "+
		"those past one per release.\n\n",
		cfg.Masters, cfg.WaitPairs, waitHoldMin, pollInterval, styleLabel(WaitPubSub), styleLabel(WaitBLPOP), styleLabel(WaitPoll),
		waitTimeout, cfg.Rounds)
	fmt.Fprintf(w, "| waiter | p50 from release reply | p99 | p50 from release sent | p99 | hand-overs/s | attempts per hand-over | CPU µs per hand-over |\n"+
		"|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range WaitStyles {
		rs := res.waitersRuns(s)
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.0f | %.2f | %.0f |\n", styleLabel(s),
			fmtMsF(medianOver(rs, quantileMs(fromReply, 0.5))), fmtMsF(medianOver(rs, quantileMs(fromReply, 0.99))),
			fmtMsF(medianOver(rs, quantileMs(fromSent, 0.5))), fmtMsF(medianOver(rs, quantileMs(fromSent, 0.99))),
			medianOver(rs, (*WaitersResult).Throughput), medianOver(rs, (*WaitersResult).attemptsPer),
			medianOver(rs, (*WaitersResult).cpuPer))
	}
	fmt.Fprintf(w, "\n| waiter | round | load | hand-overs | p50 from reply | p99 | p50 from sent | p99 | attempts | hints | spurious | missed | extra messages | errors |%s\n"+
		"|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|%s\n", cpuColumnsHead, cpuColumnsRule)
	var notes []string
	for i := range res.Waiters {
		r := &res.Waiters[i]
		fmt.Fprintf(w, "| %s | %d | %s | %d | %s | %s | %s | %s | %d | %d | %d | %d | %d | %d |%s\n", styleLabel(r.Style), r.Round, fmtLoad(r.Load), r.Handovers,
			fmtMs(r.FromReply.Quantile(0.5)), fmtMs(r.FromReply.Quantile(0.99)), fmtMs(r.FromSent.Quantile(0.5)), fmtMs(r.FromSent.Quantile(0.99)),
			r.Attempts, r.Hints, r.Spurious, r.Missed, r.Extra, r.Errors, cpuCells(r.CPU, float64(r.Handovers)))
		if r.FirstErr != "" {
			notes = append(notes, fmt.Sprintf("First error of %s round %d: `%s`", r.Style, r.Round, strings.ReplaceAll(r.FirstErr, "\n", " ")))
		}
	}
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	fmt.Fprintf(w, "\nlockproxy CPU is the sum over both proxies; CPU µs/op is per hand-over, and counts the holders' and the waiters' "+
		"commands (a poller's refused polls included). Load is the machine's 1-minute load average at the run's end, this benchmark's "+
		"processes included.\n")
}

// waitersBenchLines writes every run of scenario 6 as a testing.B line:
// one op is a hand-over, its latencies from the release's reply, then
// those from its sending and the attempts per hand-over.
func (res *Results) waitersBenchLines(w io.Writer) {
	for i := range res.Waiters {
		r := &res.Waiters[i]
		name := fmt.Sprintf("%s/%s/style=%s/pairs=%d", benchTarget(Lockproxy), ScenarioWaiters, r.Style, r.Pairs)
		extra := fmt.Sprintf("\t%d p50-sent-ns\t%d p99-sent-ns\t%.2f attempts/op", r.FromSent.Quantile(0.5).Nanoseconds(),
			r.FromSent.Quantile(0.99).Nanoseconds(), r.attemptsPer())
		benchLineExtra(w, name, r.Handovers, r.Throughput(), r.FromReply.Summary(), r.CPU, extra)
	}
}
