// Command lockbench measures lockproxy against redsync, a single direct Redis
// and twemproxy, in one run on masters it starts itself, and writes a
// markdown report with PNG charts (see package bench). Measuring twemproxy
// needs nutcracker (apt-get install nutcracker), and its profile runs need
// perf (apt-get install linux-perf); -targets without twemproxy, or
// -profile=false, leave them out.
//
//	go run ./cmd/lockbench                      # full run, ~6 minutes (3 rounds of scenarios 1, 2, 5 and 6)
//	go run ./cmd/lockbench -quick               # smoke run, ~30 seconds
//	go run ./cmd/lockbench -only hotkey,degraded
//	go run ./cmd/lockbench -only multiproxy     # 1, 2, 3 lockproxies on one master set, ~95 seconds
//	go run ./cmd/lockbench -only waiters        # release → waiter's acquisition: pub/sub, BLPOP, polling, ~60 seconds
//	go run ./cmd/lockbench -only twemproxy      # scenario 1 with twemproxy: proxy CPU per request, ~2 minutes (adds ~50 s to a full run)
//	go run ./cmd/lockbench -rounds 1            # scenarios 1, 2 and 5 once each
//
// The report is printed on stdout and written to -out/REPORT.md; progress
// goes to stderr. The exit status is 1 when a run failed (the report says
// which) and 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/bench"
	"github.com/lockproxy/lockproxy/bench/floor"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		out      = flag.String("out", "bench/out", "directory for REPORT.md and the PNG charts")
		duration = flag.Duration("duration", 5*time.Second, "recorded length of each run")
		quick    = flag.Bool("quick", false, "smoke run: 1s per run, 250ms warm-up")
		only     = flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(bench.AllScenarios, ","))
		targets  = flag.String("targets", "", "comma-separated targets (default all): "+targetList())
		binary   = flag.String("lockproxy", "", "lockproxy binary to run (default: build ./cmd/lockproxy)")
		masters  = flag.Int("masters", 5, "number of redis masters")
		timeout  = flag.Duration("node-timeout", 50*time.Millisecond, "lockproxy's node_timeout, also the degraded p99 bound; raise it on a machine busy with other work, where a master stalled past it fails a redis-benchmark run with NOQUORUM")
		rounds   = flag.Int("rounds", 3, "rounds of scenarios 1, 2, 5 and 6; their targets are judged on the median round (-quick: 1)")
		profile  = flag.Bool("profile", true, "twemproxy: after the rounds, count each proxy's system calls and sample where its CPU goes with perf, in extra runs")
		monitor  = flag.Bool("monitor", true, "multiproxy: record the masters' MONITOR streams for the exact refused-while-free figure (costs the masters CPU); false: estimate it from the workers' clock")
		floorAt  = flag.String("serve-floor", "", "serve the floor fan-out proxy (package bench/floor, a measuring stick, not a lock service) on this address, over -floor-masters, until interrupted; scenario 1 runs it itself")
		floorTo  = flag.String("floor-masters", "", "comma-separated masters of -serve-floor")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "lockbench: unexpected arguments %q\n", flag.Args())
		return 2
	}
	if *floorAt != "" {
		return serveFloor(*floorAt, split(*floorTo))
	}
	cfg := bench.Config{Masters: *masters, NodeTimeout: *timeout, Duration: *duration, Rounds: *rounds, LockproxyBin: *binary, Log: os.Stderr, MultiProxyNoMonitor: !*monitor,
		NoProxyProfile: !*profile}
	if self, err := os.Executable(); err == nil {
		cfg.FloorBin = self // serves the floor with -serve-floor
	}
	if *quick {
		cfg.Duration, cfg.Warmup, cfg.Rounds = time.Second, 250*time.Millisecond, 1
	}
	cfg.Scenarios = split(*only)
	for _, s := range cfg.Scenarios {
		if !slices.Contains(bench.AllScenarios, s) {
			fmt.Fprintf(os.Stderr, "lockbench: -only: unknown scenario %q (have %s)\n", s, strings.Join(bench.AllScenarios, ","))
			return 2
		}
	}
	for _, t := range split(*targets) {
		if !slices.Contains(bench.AllTargets, bench.Target(t)) {
			fmt.Fprintf(os.Stderr, "lockbench: -targets: unknown target %q (have %s)\n", t, targetList())
			return 2
		}
		cfg.Targets = append(cfg.Targets, bench.Target(t))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg)
	if res == nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 1
	}
	report, werr := res.WriteReport(*out, strings.TrimSpace("go run ./cmd/lockbench "+strings.Join(os.Args[1:], " ")))
	os.Stdout.Write(report)
	status := 0
	for _, e := range []error{err, werr, res.Err()} {
		if e != nil {
			fmt.Fprintln(os.Stderr, "lockbench:", e)
			status = 1
		}
	}
	return status
}

// serveFloor runs the floor proxy until SIGINT or SIGTERM.
func serveFloor(listen string, masters []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := floor.Start(listen, masters, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench -serve-floor:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "floor proxy listening on", s.Addr(), "over", masters)
	<-ctx.Done()
	s.Close()
	return 0
}

// targetList is bench.AllTargets comma-separated.
func targetList() string {
	names := make([]string, len(bench.AllTargets))
	for i, t := range bench.AllTargets {
		names[i] = string(t)
	}
	return strings.Join(names, ",")
}

// split splits a comma-separated flag value, dropping empty items.
func split(s string) []string {
	var r []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			r = append(r, f)
		}
	}
	return r
}
