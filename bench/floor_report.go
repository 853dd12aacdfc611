package bench

import (
	"fmt"
	"io"
)

// The floor (package bench/floor) is the fan-out alone: each client
// command's bytes written to every master, every reply read and counted,
// the answer written in order, on lockproxy's event loop, with none of
// lockproxy's safety work. Beside twemproxy it says whether any proxy that
// does the fan-out on this machine can match twemproxy's CPU per request
// at a depth, and beside lockproxy how much of lockproxy's CPU is its own
// work above the fan-out.

// floorCost is the floor against twemproxy and lockproxy at one depth;
// medians over the rounds, µs per request.
type floorCost struct {
	floor, floorUser, floorSys float64
	twem                       float64
	all, allUser, allSys       float64 // lockproxy over every master
	ratio                      float64 // median of the rounds' floor / twemproxy
}

// floorAt returns the comparison at pipeline p; false unless the floor,
// twemproxy and lockproxy were all measured.
func (res *Results) floorAt(p int) (floorCost, bool) {
	user := func(r *RedisBenchResult) float64 { return perReq(r.CPU.Proxy-r.CPU.ProxySys, r.Requests) }
	sys := func(r *RedisBenchResult) float64 { return perReq(r.CPU.ProxySys, r.Requests) }
	var f floorCost
	var ok [3]bool
	f.floor, ok[0] = res.medianFig(Floor, p, (*RedisBenchResult).ProxyPerReq)
	f.twem, ok[1] = res.medianFig(Twemproxy, p, (*RedisBenchResult).ProxyPerReq)
	f.all, ok[2] = res.medianFig(Lockproxy, p, (*RedisBenchResult).ProxyPerReq)
	if !ok[0] || !ok[1] || !ok[2] || f.twem <= 0 {
		return floorCost{}, false
	}
	ratios := res.proxyRatios(p, Floor, Twemproxy)
	if len(ratios) == 0 {
		return floorCost{}, false // no round measured both: no ratio to judge by
	}
	f.ratio = median(ratios)
	f.floorUser, _ = res.medianFig(Floor, p, user)
	f.floorSys, _ = res.medianFig(Floor, p, sys)
	f.allUser, _ = res.medianFig(Lockproxy, p, user)
	f.allSys, _ = res.medianFig(Lockproxy, p, sys)
	return f, true
}

// floorEdge is how far from parity the floor's ratio to twemproxy may be
// and still be called "at the edge" rather than clearly above or below:
// one run's proxy-CPU ratios swing by about this much here.
const floorEdge = 0.1

// floorVerdict places the floor's ratio to twemproxy: above the target by
// more than the noise, within it, or below it by more.
type floorVerdict int

const (
	floorBelow  floorVerdict = iota // the target is reachable
	floorEdgeOf                     // parity leaves lockproxy's own work (almost) nothing
	floorOver                       // the floor is over, but not its kernel part alone
	floorAbove                      // no fan-out proxy meets the target here
)

// verdict says "no fan-out proxy meets the target" only when the floor's
// kernel part alone (the system calls every fan-out makes) costs what
// twemproxy does in all; above the noise with less in the kernel, a
// fan-out leaner in user space than the floor could still get there.
func (f floorCost) verdict() floorVerdict {
	switch {
	case f.ratio > proxyCPUGoal+floorEdge && f.floorSys >= f.twem:
		return floorAbove
	case f.ratio > proxyCPUGoal+floorEdge:
		return floorOver
	case f.ratio >= proxyCPUGoal-floorEdge:
		return floorEdgeOf
	}
	return floorBelow
}

// floorCheckText is the part of a proxy-CPU check's value that the floor
// adds, "" without one.
func (res *Results) floorCheckText(p int) string {
	f, ok := res.floorAt(p)
	if !ok {
		return ""
	}
	switch f.verdict() {
	case floorAbove:
		return fmt.Sprintf("; the fan-out alone (floor) %.2f µs, %.2f× twemproxy's: no proxy that writes every request to %d masters meets this depth's target here (1c)",
			f.floor, f.ratio, res.Config.Masters)
	case floorOver:
		return fmt.Sprintf("; the fan-out alone (floor) %.2f µs, %.2f× twemproxy's, %.2f µs of it in the kernel: only a fan-out that spends under %.2f µs in user space, where the floor spends %.2f, meets this depth's target here (1c)",
			f.floor, f.ratio, f.floorSys, f.twem-f.floorSys, f.floorUser)
	case floorEdgeOf:
		return fmt.Sprintf("; the fan-out alone (floor) %.2f µs, %.2f× twemproxy's: at the edge, parity leaves lockproxy's own work %.2f µs where it uses %.2f (1c)",
			f.floor, f.ratio, f.twem-f.floor, f.all-f.floor)
	}
	return fmt.Sprintf("; the fan-out alone (floor) %.2f µs, %.2f× twemproxy's: reachable; lockproxy's own work above it %.2f µs, parity allows %.2f (1c)",
		f.floor, f.ratio, f.all-f.floor, f.twem-f.floor)
}

// floorMarkdown writes section 1c: what the fan-out alone costs, and what
// that says of the target at each depth.
func (res *Results) floorMarkdown(w io.Writer) {
	n := res.Config.Masters
	var rows []string
	var verdicts []string
	for _, p := range benchPipelines {
		f, ok := res.floorAt(p)
		if !ok {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %d | %.2f | %.2f (user %.2f, kernel %.2f) | %.2f× | %.2f (user %.2f, kernel %.2f) | %.2f (user %.2f, kernel %.2f) | %.2f |",
			p, f.twem, f.floor, f.floorUser, f.floorSys, f.ratio, f.all, f.allUser, f.allSys,
			f.all-f.floor, f.allUser-f.floorUser, f.allSys-f.floorSys, f.twem-f.floor))
		switch f.verdict() {
		case floorAbove:
			verdicts = append(verdicts, fmt.Sprintf("- **-P %d: the fan-out alone costs more than twemproxy** (%.2f×), %.2f µs of it in the kernel "+
				"against twemproxy's %.2f µs in all: the system calls of writing each request to %d masters and reading %d replies. No change "+
				"to lockproxy's own work reaches the target at this depth on this machine; only fewer master writes per request (bigger "+
				"batches, which need a delay that idleness must not make) or another transport would.", p, f.ratio, f.floorSys, f.twem, n, n))
		case floorOver:
			verdicts = append(verdicts, fmt.Sprintf("- **-P %d: the fan-out alone costs more than twemproxy** (%.2f×), but its kernel part, %.2f µs, "+
				"does not reach twemproxy's %.2f in all: the target is out of reach of a proxy built like the floor on this machine, and "+
				"within reach only of one that spends under %.2f µs per request in user space, lock work included (the floor spends %.2f).",
				p, f.ratio, f.floorSys, f.twem, f.twem-f.floorSys, f.floorUser))
		case floorEdgeOf:
			verdicts = append(verdicts, fmt.Sprintf("- **-P %d: the fan-out alone costs about what twemproxy does** (%.2f×, within the ±%.0f%% a run "+
				"swings here), %.2f µs of it in the kernel: the system calls of writing each request to %d masters and reading %d replies. Parity "+
				"would leave lockproxy's own work %.2f µs per request, where it uses %.2f: at this depth the target is at the edge of what a "+
				"proxy that fans out to %d masters can do on this machine, whatever its own work costs.", p, f.ratio, 100*floorEdge, f.floorSys,
				n, n, f.twem-f.floor, f.all-f.floor, n))
		default:
			verdicts = append(verdicts, fmt.Sprintf("- **-P %d: the fan-out alone costs less than twemproxy** (%.2f×): the target is reachable "+
				"at this depth. What keeps lockproxy above it is its own work above the fan-out, %.2f µs per request (%.2f of it in user space), "+
				"where parity allows %.2f: parsing and checking each command, the key queue, the vote and its per-request locks, the deadline, "+
				"the record kept for a late undo, and moving each command and reply through the engine's pipelines.", p, f.ratio,
				f.all-f.floor, f.allUser-f.floorUser, f.twem-f.floor))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## 1c. The fan-out alone: the floor proxy\n\n"+
		"*floor* is a measuring stick, not a lock service (package `bench/floor`, served by `lockbench -serve-floor`): on lockproxy's "+
		"event loop, it writes each client command's bytes unchanged to all %d masters, reads every reply, answers `+OK` once %d said "+
		"OK or nil once that cannot be, in order, and does nothing else: no command checks, no validity, no undo, no key queue, no "+
		"deadline, no locks, no metrics. It is the least CPU a proxy that fans each request out to %d masters spends on this machine, "+
		"measured in the same rounds. Medians over the rounds, µs per request:\n\n"+
		"| -P | twemproxy → 1 master | floor → %d masters | floor / twemproxy (median of rounds) | lockproxy → %d masters | lockproxy − floor | what lockproxy − floor could be for parity |\n"+
		"|--:|--:|--:|--:|--:|--:|--:|\n", n, n/2+1, n, n, n)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	fmt.Fprintln(w)
	for _, v := range verdicts {
		fmt.Fprintln(w, v)
	}
}
