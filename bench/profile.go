package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Where each proxy's CPU goes: after scenario 1's rounds, two more
// redis-benchmark runs per proxy and pipeline depth. In the first, perf stat
// counts the proxy's system calls (tracepoints, in counting mode), each read
// and write split by the side of the socket it was made on: the client
// connections (opened by redis-benchmark during the run) or the proxy's
// connections to the masters. In the second, perf record samples its call
// stacks (cpuprofile.go). perf makes the proxy's work dearer, so these runs
// give counts and shares only; CPU per request and req/s are judged on the
// rounds.

// perfInstall names the package that provides perf on Debian.
const perfInstall = "apt-get install linux-perf"

// profileDuration is the longest a profile run lasts.
const profileDuration = 2 * time.Second

// ProxyProfile is what the profile runs of one proxy at one pipeline depth
// found.
type ProxyProfile struct {
	Target   Target
	Pipeline int
	Requests int
	// MasterConns is the number of the proxy's connections to masters.
	MasterConns int
	// Client and Master are the read and write calls on the client
	// connections and on the master connections; Other those on any
	// other descriptor (wake-up eventfds, pipes, logs).
	Client, Master, Other Syscalls
	// Calls counts system calls by name (profiledCalls), "other" for the
	// rest; Total is every system call.
	Calls map[string]int64
	Total int64
	// ContextSwitches of all the proxy's threads.
	ContextSwitches int64
	// Where is the CPU profile of the second run.
	Where *CPUProfile
	// Err says why the run could not be profiled ("" when it was).
	Err string
}

// PerReq returns n per request of the run.
func (p *ProxyProfile) PerReq(n int64) float64 {
	if p.Requests <= 0 {
		return 0
	}
	return float64(n) / float64(p.Requests)
}

// profiledCalls are the system calls counted by name, beside the reads and
// writes split by side: the event loops' waits and interest changes
// (twemproxy turns EPOLLOUT on and off around its writes), twemproxy's
// getpeername (one per request), and what the Go runtime does around the
// loop (futex wake-ups, sysmon's nanosleep, preemption signals).
var profiledCalls = []string{"read", "readv", "write", "writev", "epoll_wait", "epoll_pwait", "epoll_ctl", "getpeername",
	"futex", "nanosleep", "sched_yield", "tgkill", "rt_sigreturn"}

// ioCalls are the calls split by the side of their descriptor, and whether
// each reads.
var ioCalls = []struct {
	name string
	read bool
}{{"read", true}, {"readv", true}, {"write", false}, {"writev", false}}

// proxyProfiles runs the profile runs of each proxy of scenario 1 at each
// pipeline depth.
func (r *runner) proxyProfiles(ctx context.Context) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		// Not a failed run: the rounds are measured; the report says
		// what is missing and how to install it.
		fmt.Fprintf(r.cfg.Log, "lockbench: proxy profiles skipped: perf not found; install it with `%s`\n", perfInstall)
	}
	for _, pipeline := range benchPipelines {
		for _, t := range r.redisBenchmarkTargets() {
			if t == Direct || ctx.Err() != nil {
				continue
			}
			p := ProxyProfile{Target: t, Pipeline: pipeline}
			if err != nil {
				p.Err = "perf not found: install it with `" + perfInstall + "`"
			} else if perr := r.proxyProfile(ctx, perf, &p); perr != nil {
				p.Err = perr.Error()
				r.fail("profile %s -P %d: %v", t, pipeline, perr)
			}
			r.res.Profiles = append(r.res.Profiles, p)
			if p.Err == "" {
				fmt.Fprintf(r.cfg.Log, "lockbench: syscalls  %-9s -P %-2d  %.2f/req: client reads %.2f writes %.2f, %d master conns reads %.2f writes %.2f, other %.2f; %.2f context switches/req\n",
					t, pipeline, p.PerReq(p.Total), p.PerReq(p.Client.Reads), p.PerReq(p.Client.Writes), p.MasterConns,
					p.PerReq(p.Master.Reads), p.PerReq(p.Master.Writes), p.PerReq(p.Total-p.Client.Total()-p.Master.Total()),
					p.PerReq(p.ContextSwitches))
				fmt.Fprintf(r.cfg.Log, "lockbench: profile   %-9s -P %-2d  %d samples: %s\n", t, pipeline, p.Where.Samples, p.Where.top(6))
			}
		}
	}
}

// proxyProfile runs the profile runs of p's target and pipeline depth.
func (r *runner) proxyProfile(ctx context.Context, perf string, p *ProxyProfile) error {
	addr, proc, meter := r.benchEndpoint(p.Target)
	n, err := r.calibrate(ctx, addr, p.Pipeline, meter)
	if err != nil {
		return fmt.Errorf("calibration: %w", err)
	}
	// Counts and shares per request settle within a second or two of
	// load: the profile runs are shorter than the measured ones.
	if r.cfg.Duration > profileDuration {
		n = max(1000, int(float64(n)*profileDuration.Seconds()/r.cfg.Duration.Seconds()))
	}
	fds, err := waitProxyFds(ctx, proc.pid(), r.c.masterAddrs())
	if err != nil {
		return err
	}
	p.MasterConns = len(fds.master)
	name := filepath.Join(r.c.dir, fmt.Sprintf("perf-%s-P%d", p.Target, p.Pipeline))
	ps, err := startPerfStat(ctx, perf, proc.pid(), name+".csv", profileEvents(fds))
	if err != nil {
		return err
	}
	res, err := runRedisBenchmark(ctx, addr, benchClients, p.Pipeline, n, r.cfg.Keys, r.prefix(), meter, r.benchLimit())
	counts, perr := ps.counts()
	if err = cmp.Or(err, perr); err != nil {
		return err
	}
	p.Requests = res.Requests
	if err := p.fill(counts); err != nil {
		return err
	}
	pr, err := startPerfRecord(ctx, perf, proc.pid(), name+".data")
	if err != nil {
		return err
	}
	_, err = runRedisBenchmark(ctx, addr, benchClients, p.Pipeline, n, r.cfg.Keys, r.prefix(), meter, r.benchLimit())
	where, perr := pr.profile(ctx)
	if err = cmp.Or(err, perr); err != nil {
		return err
	}
	p.Where = where
	return nil
}

// proxyFds are a proxy's descriptors before a profiled run: those connected
// to a master, and all of them (anything opened later is a client's).
type proxyFds struct{ master, all []int }

// profileEvents lists the perf events of a profile, in the order fill reads
// their counts: every system call, the split reads and writes (client side,
// then master side, per call of ioCalls), each call of profiledCalls, and
// context switches.
func profileEvents(fds proxyFds) []perfEvent {
	var masterF, clientF []string
	for _, fd := range fds.master {
		masterF = append(masterF, "fd == "+strconv.Itoa(fd))
	}
	for _, fd := range fds.all {
		clientF = append(clientF, "fd != "+strconv.Itoa(fd))
	}
	if len(masterF) == 0 {
		masterF = []string{"fd == 4294967295"} // matches nothing
	}
	if len(clientF) == 0 {
		clientF = []string{"fd < 4294967295"} // matches everything
	}
	ev := []perfEvent{{name: "raw_syscalls:sys_enter"}}
	for _, c := range ioCalls {
		ev = append(ev,
			perfEvent{name: "syscalls:sys_enter_" + c.name, filter: strings.Join(clientF, " && ")},
			perfEvent{name: "syscalls:sys_enter_" + c.name, filter: strings.Join(masterF, " || ")})
	}
	for _, c := range profiledCalls {
		ev = append(ev, perfEvent{name: "syscalls:sys_enter_" + c})
	}
	return append(ev, perfEvent{name: "context-switches"})
}

// fill sets p's figures from the counts of profileEvents, in their order.
func (p *ProxyProfile) fill(counts []int64) error {
	want := 1 + 2*len(ioCalls) + len(profiledCalls) + 1
	if len(counts) != want {
		return fmt.Errorf("perf stat gave %d counts, want %d", len(counts), want)
	}
	p.Total = counts[0]
	i := 1
	for _, c := range ioCalls {
		client, master := Syscalls{}, Syscalls{}
		if c.read {
			client.Reads, master.Reads = counts[i], counts[i+1]
		} else {
			client.Writes, master.Writes = counts[i], counts[i+1]
		}
		p.Client, p.Master = p.Client.add(client), p.Master.add(master)
		i += 2
	}
	p.Calls = map[string]int64{}
	named := int64(0)
	for _, c := range profiledCalls {
		p.Calls[c] = counts[i]
		named += counts[i]
		i++
	}
	p.Calls["other"] = max(0, p.Total-named)
	for _, c := range ioCalls {
		p.Other = p.Other.add(ioSide(c.read, p.Calls[c.name]))
	}
	p.Other = p.Other.sub(p.Client).sub(p.Master)
	p.ContextSwitches = counts[i]
	return nil
}

func ioSide(read bool, n int64) Syscalls {
	if read {
		return Syscalls{Reads: n}
	}
	return Syscalls{Writes: n}
}

// waitProxyFds waits (up to 2s) until the proxy has closed the client
// connections of earlier runs, so that every client connection of the next
// run is a new descriptor, and returns its descriptors.
func waitProxyFds(ctx context.Context, pid int, masters []string) (proxyFds, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		fds, clients, err := readProxyFds(pid, masters)
		if err != nil {
			return fds, err
		}
		if clients == 0 {
			return fds, nil
		}
		if time.Now().After(deadline) {
			return fds, fmt.Errorf("pid %d still has %d client connections 2s after the last run", pid, clients)
		}
		select {
		case <-ctx.Done():
			return fds, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// syscallBenchLines writes each profile as a testing.B line: system calls
// per request, by kind and side.
func (res *Results) syscallBenchLines(w io.Writer) {
	for i := range res.Profiles {
		p := &res.Profiles[i]
		if p.Err != "" || p.Requests <= 0 {
			continue
		}
		fmt.Fprintf(w, "%s/syscalls/c=%d/P=%d-%d\t%d\t%.3f syscalls/op\t%.3f client-reads/op\t%.3f client-writes/op\t%.3f master-reads/op\t%.3f master-writes/op\t%.3f epoll-waits/op\t%.3f futex/op\t%.3f ctxsw/op\n",
			benchTarget(p.Target), benchClients, p.Pipeline, runtime.GOMAXPROCS(0), p.Requests, p.PerReq(p.Total),
			p.PerReq(p.Client.Reads), p.PerReq(p.Client.Writes), p.PerReq(p.Master.Reads), p.PerReq(p.Master.Writes),
			p.PerReq(p.Calls["epoll_wait"]+p.Calls["epoll_pwait"]), p.PerReq(p.Calls["futex"]), p.PerReq(p.ContextSwitches))
	}
}
