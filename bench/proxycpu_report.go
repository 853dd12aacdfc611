package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// proxyCPUMarkdown writes the section of scenario 1 that compares the
// proxies' own CPU: every round of every target, the medians side by side,
// the system call profiles, and what the figures mean.
func (res *Results) proxyCPUMarkdown(w io.Writer) {
	if len(res.redisBenchRuns(Twemproxy, 1))+len(res.redisBenchRuns(Twemproxy, 16)) == 0 {
		return
	}
	n := res.Config.Masters
	fmt.Fprintf(w, "\n## 1b. Proxy CPU per request: twemproxy → 1 master, lockproxy → %d masters\n\n"+
		"Scenario 1's runs, the same rounds: direct Redis, then twemproxy (nutcracker, one server pool, `redis: true`, the first master "+
		"its only server, one connection to it), then lockproxy, back to back. twemproxy forwards each `SET NX PX` to its one master and "+
		"passes the reply back; lockproxy sends it to all %d masters, counts the votes, answers once a quorum (%d) agreed or cannot, "+
		"and undoes a grant that missed the quorum. *lockproxy1*, when there, is a second lockproxy whose only master is twemproxy's "+
		"(a quorum of 1): twemproxy's job done by lockproxy's code, so that its own cost per request and the cost of its fan-out can "+
		"be told apart (below the medians). *floor*, when there, is the fan-out alone, without lockproxy's work (section 1c). Each proxy's CPU per request is the user+system CPU of its process (all threads, "+
		"`/proc/<pid>/stat`) during the run over the requests redis-benchmark completed, measured the same way for both; *sys* is "+
		"its kernel part. *calls/req* are its read- and write-family system calls (`/proc/<pid>/io` syscr+syscw). Masters and client "+
		"likewise (the masters' sum; twemproxy and direct Redis keep the others idle). µs per request.\n\n", n, n, n/2+1)
	fmt.Fprintf(w, "| -P | target | round | req/s | p50 ms | p99 ms | proxy CPU | user | sys | proxy calls/req | masters CPU | masters calls/req | client CPU |\n"+
		"|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, p := range benchPipelines {
		for _, t := range []Target{Direct, Twemproxy, Lockproxy, LockproxyOne, Floor} {
			for _, r := range res.redisBenchRuns(t, p) {
				proxy := "– | – | – | –"
				if r.CPU.Proxy >= 0 {
					proxy = fmt.Sprintf("%.2f | %.2f | %.2f | %.2f", r.ProxyPerReq(), perReq(r.CPU.Proxy-r.CPU.ProxySys, r.Requests),
						perReq(r.CPU.ProxySys, r.Requests), float64(r.CPU.ProxyIO.Total())/float64(r.Requests))
				}
				fmt.Fprintf(w, "| %d | %s | %d | %.0f | %s | %s | %s | %.2f | %.2f | %.2f |\n", p, r.Target, r.Round, r.RPS,
					fmtMs(r.Lat.P50), fmtMs(r.Lat.P99), proxy, perReq(r.CPU.MastersTotal(), r.Requests),
					float64(r.CPU.MastersIO.Total())/float64(r.Requests), perReq(r.CPU.Client, r.Requests))
			}
		}
	}
	res.proxyCPUMedians(w)
	res.fanOutMarkdown(w)
	res.syscallMarkdown(w)
	res.cpuProfileMarkdown(w)
	res.proxyCPUMeaning(w)
	res.floorMarkdown(w)
}

// proxyCPUMedians writes the median of every figure over the rounds, the
// three targets side by side.
func (res *Results) proxyCPUMedians(w io.Writer) {
	targets := []Target{Direct, Twemproxy, Lockproxy}
	head := fmt.Sprintf("| -P | figure | direct | twemproxy → 1 master | lockproxy → %d masters |", res.Config.Masters)
	if len(res.redisBenchRuns(LockproxyOne, 1))+len(res.redisBenchRuns(LockproxyOne, 16)) > 0 {
		targets = append(targets, LockproxyOne)
		head += " lockproxy → 1 master |"
	}
	if len(res.redisBenchRuns(Floor, 1))+len(res.redisBenchRuns(Floor, 16)) > 0 {
		targets = append(targets, Floor)
		head += fmt.Sprintf(" floor → %d masters |", res.Config.Masters)
	}
	fmt.Fprintf(w, "\nMedians over the rounds, each figure on its own:\n\n%s\n|--:|---|%s\n", head, strings.Repeat("--:|", len(targets)))
	rows := []struct {
		name string
		fig  func(*RedisBenchResult) float64
		fmt  string
		self bool // a figure of the proxy process: none for direct
	}{
		{"req/s", func(r *RedisBenchResult) float64 { return r.RPS }, "%.0f", false},
		{"p50 ms", func(r *RedisBenchResult) float64 { return r.Lat.P50.Seconds() * 1000 }, "%.3f", false},
		{"p99 ms", func(r *RedisBenchResult) float64 { return r.Lat.P99.Seconds() * 1000 }, "%.3f", false},
		{"**proxy CPU µs/req**", (*RedisBenchResult).ProxyPerReq, "**%.2f**", true},
		{"proxy user µs/req", func(r *RedisBenchResult) float64 { return perReq(r.CPU.Proxy-r.CPU.ProxySys, r.Requests) }, "%.2f", true},
		{"proxy sys µs/req", func(r *RedisBenchResult) float64 { return perReq(r.CPU.ProxySys, r.Requests) }, "%.2f", true},
		{"proxy read+write calls/req", func(r *RedisBenchResult) float64 { return float64(r.CPU.ProxyIO.Total()) / float64(r.Requests) }, "%.2f", true},
		{"masters CPU µs/req", func(r *RedisBenchResult) float64 { return perReq(r.CPU.MastersTotal(), r.Requests) }, "%.2f", false},
		{"masters read+write calls/req", func(r *RedisBenchResult) float64 { return float64(r.CPU.MastersIO.Total()) / float64(r.Requests) }, "%.2f", false},
		{"client CPU µs/req", func(r *RedisBenchResult) float64 { return perReq(r.CPU.Client, r.Requests) }, "%.2f", false},
	}
	for _, p := range benchPipelines {
		for _, row := range rows {
			cells := make([]string, len(targets))
			for i, t := range targets {
				var v []float64
				for _, r := range res.redisBenchRuns(t, p) {
					if !row.self || r.CPU.Proxy >= 0 {
						v = append(v, row.fig(r))
					}
				}
				cells[i] = "–"
				if len(v) > 0 {
					cells[i] = fmt.Sprintf(row.fmt, median(v))
				}
			}
			fmt.Fprintf(w, "| %d | %s | %s |\n", p, row.name, strings.Join(cells, " | "))
		}
	}
}

// syscallMarkdown writes the system call profiles of the proxies.
func (res *Results) syscallMarkdown(w io.Writer) {
	if len(res.Profiles) == 0 {
		return
	}
	fmt.Fprintf(w, "\nSystem calls per request of each proxy, from one more run per proxy and depth with `perf stat` counting its system calls "+
		"(tracepoints; counts only, since counting makes every call dearer). Reads and writes are split by the socket they were made on: "+
		"the client connections, or the proxy's connections to masters (*conns*).\n\n"+
		"| -P | proxy | all calls/req | client reads | client writes | master conns | master reads | master writes | epoll waits | epoll_ctl | getpeername | futex | nanosleep | other calls | context switches/req |\n"+
		"|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var notes []string
	for i := range res.Profiles {
		p := &res.Profiles[i]
		if p.Err != "" {
			notes = append(notes, fmt.Sprintf("%s -P %d not profiled: %s", p.Target, p.Pipeline, strings.ReplaceAll(p.Err, "\n", " ")))
			continue
		}
		other := p.Total - p.Client.Total() - p.Master.Total()
		for _, c := range []string{"epoll_wait", "epoll_pwait", "epoll_ctl", "getpeername", "futex", "nanosleep"} {
			other -= p.Calls[c]
		}
		fmt.Fprintf(w, "| %d | %s | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", p.Pipeline, p.Target,
			p.PerReq(p.Total), p.PerReq(p.Client.Reads), p.PerReq(p.Client.Writes), p.MasterConns, p.PerReq(p.Master.Reads),
			p.PerReq(p.Master.Writes), p.PerReq(p.Calls["epoll_wait"]+p.Calls["epoll_pwait"]), p.PerReq(p.Calls["epoll_ctl"]),
			p.PerReq(p.Calls["getpeername"]), p.PerReq(p.Calls["futex"]), p.PerReq(p.Calls["nanosleep"]), p.PerReq(other),
			p.PerReq(p.ContextSwitches))
	}
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

// medianFig is the median of fig over the rounds of t at pipeline p that
// measured a proxy; false when there is none.
func (res *Results) medianFig(t Target, p int, fig func(*RedisBenchResult) float64) (float64, bool) {
	var v []float64
	for _, r := range res.redisBenchRuns(t, p) {
		if r.CPU.Proxy >= 0 && r.Requests > 0 {
			v = append(v, fig(r))
		}
	}
	return median(v), len(v) > 0
}

// syscallProfile returns the profile of t at pipeline p, nil when none was
// taken.
func (res *Results) proxyProfile(t Target, p int) *ProxyProfile {
	for i := range res.Profiles {
		if s := &res.Profiles[i]; s.Target == t && s.Pipeline == p && s.Err == "" {
			return s
		}
	}
	return nil
}

// proxyCPUMeaning writes what the comparison means: what each proxy does
// per request, then, at each depth, how far apart the two are and in which
// part (user space or kernel, client side or master side).
func (res *Results) proxyCPUMeaning(w io.Writer) {
	n := res.Config.Masters
	fmt.Fprintf(w, "\n**What the figures mean.** The two proxies do different work for one request. twemproxy parses it, queues it on its one "+
		"connection to its one master and relays the reply: per request it reads and writes the client's connection, takes a share of one "+
		"`writev` and one `read` on the master's (it packs whatever is queued into one `writev`), and turns write interest on and off with "+
		"`epoll_ctl`. lockproxy reads and writes the client's connection alike, but writes each request to all %d masters and reads %d "+
		"replies (its event loop writes each master once per round, whatever arrived meanwhile), counts the votes, answers the client once "+
		"the outcome is known, and keeps a refused or failed attempt until its last master has answered, to undo a late grant. Its masters "+
		"so run %d `SET`s per request where twemproxy's run one (masters CPU above). The target asks that lockproxy's own process cost "+
		"no more than twemproxy's all the same.\n\n", n, n, n)
	for _, p := range benchPipelines {
		// The round with the median CPU per request, so that user and
		// kernel add up to it.
		cpu := func(t Target) (all, user, sys float64, ok bool) {
			var rs []*RedisBenchResult
			for _, r := range res.redisBenchRuns(t, p) {
				if r.CPU.Proxy >= 0 && r.Requests > 0 {
					rs = append(rs, r)
				}
			}
			r := medianOf(rs, (*RedisBenchResult).ProxyPerReq)
			if r == nil {
				return 0, 0, 0, false
			}
			return r.ProxyPerReq(), perReq(r.CPU.Proxy-r.CPU.ProxySys, r.Requests), perReq(r.CPU.ProxySys, r.Requests), true
		}
		la, lu, ls, lok := cpu(Lockproxy)
		ta, tu, ts, tok := cpu(Twemproxy)
		if !lok || !tok || ta <= 0 {
			continue
		}
		fmt.Fprintf(w, "- **-P %d**: lockproxy %.2f µs/request (user %.2f, kernel %.2f) against twemproxy's %.2f (user %.2f, kernel %.2f), "+
			"median rounds: %.2f×, %+.2f µs, of which %+.2f in user space and %+.2f in the kernel.", p, la, lu, ls, ta, tu, ts, la/ta, la-ta, lu-tu, ls-ts)
		lp, tp := res.proxyProfile(Lockproxy, p), res.proxyProfile(Twemproxy, p)
		if lp != nil && tp != nil {
			fmt.Fprintf(w, " System calls per request (profile runs): lockproxy %.2f client reads and %.2f client writes, %.2f reads and %.2f writes "+
				"on its %d master connections, %.2f in all; twemproxy %.2f and %.2f, %.2f and %.2f on its one, %.2f in all (%.2f of them `epoll_ctl`).",
				lp.PerReq(lp.Client.Reads), lp.PerReq(lp.Client.Writes), lp.PerReq(lp.Master.Reads), lp.PerReq(lp.Master.Writes), lp.MasterConns,
				lp.PerReq(lp.Total), tp.PerReq(tp.Client.Reads), tp.PerReq(tp.Client.Writes), tp.PerReq(tp.Master.Reads),
				tp.PerReq(tp.Master.Writes), tp.PerReq(tp.Total), tp.PerReq(tp.Calls["epoll_ctl"]))
		}
		if lp != nil && tp != nil && lp.Where != nil && tp.Where != nil {
			l, t := splitProfile(lp.Where, la), splitProfile(tp.Where, ta)
			fmt.Fprintf(w, " Where the CPU went (profile runs, scaled to the medians), lockproxy against twemproxy, µs/request: "+
				"reads and writes %.2f against %.2f, epoll %.2f against %.2f, other system calls %.2f against %.2f, rescheduling and "+
				"interrupts %.2f against %.2f; its own code %.2f (%s) against nutcracker and the C library's %.2f; the Go runtime %.2f and "+
				"its garbage collector %.2f.", l.io, t.io, l.epoll, t.epoll, l.otherSys, t.otherSys, l.resched, t.resched,
				l.own, l.ownDetail, t.own, l.runtime, l.gc)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n**Which cost remains.** On loopback a `write` also runs the receiving socket's TCP input and wakes its reader, so "+
		"a write costs the writer several times a read. Both proxies make one client read and one client write per client round trip "+
		"(one per request at -P 1, one per 16 requests at -P 16); no proxy goes below that, and at -P 1 it is most of either one's CPU. "+
		"What lockproxy adds in the kernel is its master side: each batch is %d writes and %d reads where twemproxy's is one of each, "+
		"and every write wakes a master; at -P 16 the batches are large and this is a small part. What it adds in user space is its own "+
		"work per request (parsing and checking the command, the vote over %d replies, the key queue, the record of a refused attempt "+
		"kept until its last master has answered, for a late undo) and the Go runtime's (the garbage collector; the scheduler and "+
		"sysmon around the event loop's blocking `epoll_pwait`). Section 1c, when the floor was measured, says at which depth "+
		"the first is a limit of the machine and how far the second is from parity; `docs/bench/proxy-cpu.md` has a function-level "+
		"profile and the changes to lockproxy that would lower its part.\n", n, n, n)
}

// profileSplit groups a CPU profile's categories for the summary, in µs per
// request.
type profileSplit struct {
	io, epoll, otherSys, resched, own, runtime, gc float64
	ownDetail                                      string // the proxy's own code by package, largest first
}

// splitProfile scales p's shares to us µs per request and groups them.
func splitProfile(p *CPUProfile, us float64) profileSplit {
	var s profileSplit
	var own []string
	for _, c := range p.categories() {
		v := p.Share(c) * us
		switch c {
		case "kernel: read", "kernel: readv", "kernel: write", "kernel: writev":
			s.io += v
		case "kernel: epoll_wait", "kernel: epoll_ctl":
			s.epoll += v
		case catReturn, catInterrupts:
			s.resched += v
		case catRuntime:
			s.runtime += v
		case catGC:
			s.gc += v
		case catOtherUser:
		default:
			if strings.HasPrefix(c, "kernel: ") {
				s.otherSys += v
				continue
			}
			s.own += v
			own = append(own, fmt.Sprintf("%s %.2f", strings.TrimPrefix(c, "user: "), v))
		}
	}
	s.ownDetail = strings.Join(own, ", ")
	return s
}

// cpuProfileMarkdown writes where each proxy's CPU went: every category of
// the profiles, in µs per request (its share of the profile times the
// proxy's median CPU per request over the rounds) and in percent.
func (res *Results) cpuProfileMarkdown(w io.Writer) {
	var ps []*ProxyProfile
	for _, p := range benchPipelines {
		for _, t := range []Target{Twemproxy, Lockproxy} {
			if pr := res.proxyProfile(t, p); pr != nil && pr.Where != nil {
				ps = append(ps, pr)
			}
		}
	}
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "\nWhere each proxy's CPU goes, from `perf record -g` (%d Hz) in one more run per proxy and depth: each sample in the kernel is "+
		"put under the system call it was in; each in user space under the proxy's own code (a Go package of lockproxy, with the runtime "+
		"helpers it called, such as memmove, map hashing and allocation; the nutcracker binary), the Go runtime (scheduler, sysmon, "+
		"timers), its garbage collector, or the C library. Each cell is the category's share of the proxy's CPU times the proxy's median "+
		"CPU per request over the rounds, in µs per request, then the share.\n\n| category |", profileHz)
	seen := map[string]bool{}
	var cats []string
	for _, p := range ps {
		fmt.Fprintf(w, " %s -P %d |", p.Target, p.Pipeline)
		for _, c := range p.Where.categories() {
			if !seen[c] {
				seen[c] = true
				cats = append(cats, c)
			}
		}
	}
	// Kernel categories first, each group by its largest share.
	largest := func(c string) float64 {
		m := 0.0
		for _, p := range ps {
			m = max(m, p.Where.Share(c))
		}
		return m
	}
	slices.SortStableFunc(cats, func(a, b string) int {
		ka, kb := strings.HasPrefix(a, "kernel"), strings.HasPrefix(b, "kernel")
		if ka != kb {
			if ka {
				return -1
			}
			return 1
		}
		return cmp.Compare(largest(b), largest(a))
	})
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("--:|", len(ps)))
	total := func(kernel bool) string {
		var cells []string
		for _, p := range ps {
			us, _ := res.medianFig(p.Target, p.Pipeline, (*RedisBenchResult).ProxyPerReq)
			share := 0.0
			for c, n := range p.Where.ByCat {
				if strings.HasPrefix(c, "kernel") == kernel {
					share += float64(n) / float64(p.Where.Samples)
				}
			}
			cells = append(cells, fmt.Sprintf("**%.2f** (%.0f%%)", share*us, 100*share))
		}
		return strings.Join(cells, " | ")
	}
	fmt.Fprintf(w, "| **kernel** | %s |\n", total(true))
	for i, c := range cats {
		if i > 0 && strings.HasPrefix(cats[i-1], "kernel") && !strings.HasPrefix(c, "kernel") {
			fmt.Fprintf(w, "| **user** | %s |\n", total(false))
		}
		cells := make([]string, len(ps))
		for j, p := range ps {
			us, _ := res.medianFig(p.Target, p.Pipeline, (*RedisBenchResult).ProxyPerReq)
			if p.Where.ByCat[c] == 0 {
				cells[j] = "–"
				continue
			}
			cells[j] = fmt.Sprintf("%.2f (%.1f%%)", p.Where.Share(c)*us, 100*p.Where.Share(c))
		}
		fmt.Fprintf(w, "| %s | %s |\n", strings.TrimPrefix(strings.TrimPrefix(c, "kernel: "), "user: "), strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\nSamples: %s.\n", func() string {
		var s []string
		for _, p := range ps {
			s = append(s, fmt.Sprintf("%s -P %d %d", p.Target, p.Pipeline, p.Where.Samples))
		}
		return strings.Join(s, ", ")
	}())
}
