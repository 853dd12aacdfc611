package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// File names WriteReport creates in its directory.
const (
	ReportFile     = "REPORT.md"
	ThroughputPNG  = "throughput.png"
	LatencyCDFPNG  = "latency_cdf.png"
	benchPkg       = "github.com/lockproxy/lockproxy/bench"
	cpuColumnsHead = " proxy CPU | masters CPU | client CPU | CPU µs/op |"
	cpuColumnsRule = "---:|---:|---:|---:|"
)

// WriteReport writes REPORT.md and the PNG charts into dir and returns the
// report's text. command is the command line that produced res, quoted in the
// report so anyone can rerun it.
func (res *Results) WriteReport(dir, command string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	res.Markdown(&b, command)
	if err := os.WriteFile(filepath.Join(dir, ReportFile), b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := res.writeCharts(dir); err != nil {
		return b.Bytes(), err
	}
	return b.Bytes(), nil
}

// Markdown renders the report.
func (res *Results) Markdown(w io.Writer, command string) {
	cfg := res.Config
	fmt.Fprintf(w, "# lockproxy benchmark\n\n")
	fmt.Fprintf(w, "Command: `%s`  \n", command)
	fmt.Fprintf(w, "Machine: %s  \n", res.Machine)
	fmt.Fprintf(w, "Setup: %d redis masters and lockproxy (node_timeout %v) on this machine, shared with the load generator; "+
		"%v recorded per run after %v of warm-up; runs one after the other. Scenarios 1, 2, 5 and 6 run %d rounds, each target once per round "+
		"back to back; their targets are judged on the median round (of the rounds' ratios, for 1 and 2: one run swings ±10%% here), "+
		"and the charts show the median round.\n\n", cfg.Masters, cfg.NodeTimeout, cfg.Duration, cfg.Warmup, cfg.Rounds)
	fmt.Fprintf(w, "CPU columns are cores busy on average during the run (utime+stime from /proc/<pid>/stat); "+
		"masters is the sum over all %d; client is the load generator (redis-benchmark, or the Go workload process); "+
		"CPU µs/op is the CPU of all of them per operation. Latencies are in milliseconds.\n\n", cfg.Masters)

	fmt.Fprintf(w, "## Targets (issues 3, 11, 12 and 14)\n\n| comparison | target | measured | |\n|---|---|---:|:-:|\n")
	for _, c := range res.Checks() {
		v := c.Value
		if v == "" {
			v = "not measured"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", c.What, c.Goal, v, c.Mark())
	}

	if len(res.RedisBench) > 0 {
		fmt.Fprintf(w, "\n## 1. redis-benchmark `SET key:__rand_int__ val NX PX 10000`, -r %d\n\n", cfg.Keys)
		fmt.Fprintf(w, "| target | clients | pipeline | round | req/s | p50 | p99 | p99.9 |%s\n|---|--:|--:|--:|--:|--:|--:|--:|%s\n", cpuColumnsHead, cpuColumnsRule)
		for _, r := range res.RedisBench {
			fmt.Fprintf(w, "| %s | %d | %d | %d | %.0f | %s | %s | %s |%s\n", r.Target, r.Clients, r.Pipeline, r.Round, r.RPS,
				fmtMs(r.Lat.P50), fmtMs(r.Lat.P99), fmtMs(r.Lat.P999), cpuCells(r.CPU, float64(r.Requests)))
		}
		fmt.Fprintf(w, "\nLatency is redis-benchmark's own, per request (with -P 16 a request waits for its whole pipeline); "+
			"p99.9 is read off its percentile distribution. Through lockproxy a refused SET NX (key held) needs no undo when every master answered nil (none set it); a split vote is undone on every master that said yes or did not answer, as Redlock requires. "+
			"The proxy CPU column is the proxy's of the row (lockproxy or twemproxy), – for direct Redis.\n")
	}
	res.proxyCPUMarkdown(w)

	if len(res.AcquireRelease) > 0 {
		fmt.Fprintf(w, "\n## 2. go-redis acquire + release\n\nEach operation: `SET <random key of %d> <token> NX PX 10000`, then the compare-and-delete "+
			"script by EVALSHA. redsync: a new mutex per operation, `WithTries(1)`, Lock then Unlock, over one go-redis pool per master. "+
			"direct: the first master alone. Latency is of the acquire.\n\n", cfg.Keys)
		loadTable(w, "workers", "pairs/s", byWorkers(res.AcquireRelease))
	}

	if len(res.HotKey) > 0 {
		fmt.Fprintf(w, "\n## 3. Hot key\n\n%d workers, one key: acquire (retrying 0.5–1.5 ms after a refusal; redsync retries by itself "+
			"with the same delay, and in the %q row with its default policy: up to 32 tries 50–250 ms apart), hold 1 ms, release. "+
			"Latency is from the first attempt to the acquisition; a redsync Lock that ran out of tries counts as not acquired.\n\n",
			cfg.HotWorkers, RedsyncDefaultRetry)
		loadTable(w, "workers", "acquisitions/s", byWorkers(res.HotKey))
	}

	if res.Degraded != nil {
		fmt.Fprintf(w, "\n## 4. Degraded: one master paused\n\nScenario 2 at %d workers through lockproxy with the last master stopped by SIGSTOP "+
			"(resumed afterwards), against the unpaused figure.\n\n", res.Degraded.Workers)
		n := cfg.Masters
		var rows []labeled
		if res.DegradedBase != nil {
			rows = append(rows, labeled{fmt.Sprintf("%d of %d", n, n), res.DegradedBase})
		}
		rows = append(rows, labeled{fmt.Sprintf("%d of %d (1 paused)", n-1, n), res.Degraded})
		loadTable(w, "masters answering", "pairs/s", rows)
	}

	res.multiProxyMarkdown(w)
	res.waitersMarkdown(w)

	if len(res.AcquireRelease) > 0 {
		fmt.Fprintf(w, "\n## Charts\n\n![pairs/s vs workers](%s)\n\n![acquire latency CDF](%s)\n", ThroughputPNG, LatencyCDFPNG)
	}

	fmt.Fprintf(w, "\n## benchstat\n\nThe same figures as `testing.B` lines: save them from two runs and compare with `benchstat old.txt new.txt`.\n\n```\n")
	res.BenchLines(w)
	fmt.Fprintf(w, "```\n")

	if len(res.Errors) > 0 {
		fmt.Fprintf(w, "\n## Errors\n\n")
		for _, e := range res.Errors {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
}

// labeled is a table row: a result and the value of its second column.
type labeled struct {
	label string
	r     *LoadResult
}

func byWorkers(rs []LoadResult) []labeled {
	rows := make([]labeled, len(rs))
	for i := range rs {
		rows[i] = labeled{fmt.Sprint(rs[i].Workers), &rs[i]}
		if rs[i].Round > 0 {
			rows[i].label += fmt.Sprintf(" · round %d", rs[i].Round)
		}
	}
	return rows
}

// loadTable writes one table of Go workload results, then the first error
// of each row that had errors.
func loadTable(w io.Writer, col, unit string, rows []labeled) {
	fmt.Fprintf(w, "| target | %s | %s | p50 | p99 | p99.9 | not acquired | errors |%s\n|---|--:|--:|--:|--:|--:|--:|--:|%s\n",
		col, unit, cpuColumnsHead, cpuColumnsRule)
	var notes []string
	for _, row := range rows {
		r := row.r
		name := string(r.Target)
		if r.Variant != "" {
			name += " (" + r.Variant + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %d | %d |%s\n", name, row.label, r.Throughput(),
			fmtMs(r.Lat.Quantile(0.5)), fmtMs(r.Lat.Quantile(0.99)), fmtMs(r.Lat.Quantile(0.999)),
			r.NotAcquired, r.Errors, cpuCells(r.CPU, float64(r.Ops)))
		if r.FirstErr != "" {
			notes = append(notes, fmt.Sprintf("First error of %s (%s %s): `%s`", r.Target, col, row.label, strings.ReplaceAll(r.FirstErr, "\n", " ")))
		}
	}
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

// cpuCells renders the CPU columns of a row; ops is the number of operations
// the CPU time paid for.
func cpuCells(c CPU, ops float64) string {
	proxy := "–"
	if c.Proxy >= 0 {
		proxy = fmt.Sprintf("%.2f", c.Cores(c.Proxy))
	}
	perOp := "–"
	if ops > 0 {
		perOp = fmt.Sprintf("%.1f", float64(c.Total().Microseconds())/ops)
	}
	return fmt.Sprintf(" %s | %.2f | %.2f | %s |", proxy, c.Cores(c.MastersTotal()), c.Cores(c.Client), perOp)
}

// BenchLines writes every result as a testing.B line, with the header lines
// benchstat uses to tell configurations apart.
func (res *Results) BenchLines(w io.Writer) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: %s\ncpu: %s\n", runtime.GOOS, runtime.GOARCH, benchPkg, res.Machine.CPUModel)
	for _, r := range res.RedisBench {
		name := fmt.Sprintf("%s/redis-benchmark/c=%d/P=%d", benchTarget(r.Target), r.Clients, r.Pipeline)
		benchLineExtra(w, name, int64(r.Requests), r.RPS, r.Lat, r.CPU, redisBenchExtra(r))
	}
	res.syscallBenchLines(w)
	for _, g := range []struct {
		name string
		rs   []LoadResult
	}{{ScenarioAcquireRelease, res.AcquireRelease}, {ScenarioHotKey, res.HotKey}} {
		for _, r := range g.rs {
			name := fmt.Sprintf("%s/%s/workers=%d", benchTarget(r.Target), g.name, r.Workers)
			if r.Variant != "" {
				name = fmt.Sprintf("%s/%s/%s/workers=%d", benchTarget(r.Target), g.name, strings.ReplaceAll(r.Variant, " ", "-"), r.Workers)
			}
			benchLine(w, name, r.Ops, r.Throughput(), r.Lat.Summary(), r.CPU)
		}
	}
	if r := res.Degraded; r != nil {
		name := fmt.Sprintf("%s/%s/workers=%d", benchTarget(r.Target), ScenarioDegraded, r.Workers)
		benchLine(w, name, r.Ops, r.Throughput(), r.Lat.Summary(), r.CPU)
	}
	res.multiProxyBenchLines(w)
	res.waitersBenchLines(w)
}

// benchTarget is the Benchmark function name of a target.
func benchTarget(t Target) string {
	s := string(t)
	return "Benchmark" + strings.ToUpper(s[:1]) + s[1:]
}

func benchLine(w io.Writer, name string, n int64, perSec float64, q Quantiles, c CPU) {
	benchLineExtra(w, name, n, perSec, q, c, "")
}

// benchLineExtra is benchLine with further metrics ("\t<value> <unit>"...)
// at the end.
func benchLineExtra(w io.Writer, name string, n int64, perSec float64, q Quantiles, c CPU, extra string) {
	if n <= 0 || perSec <= 0 {
		return
	}
	cpuPerOp := float64(c.Total()) / float64(n)
	fmt.Fprintf(w, "%s-%d\t%d\t%.0f ns/op\t%.0f ops/s\t%d p50-ns\t%d p99-ns\t%d p99.9-ns\t%.0f cpu-ns/op%s\n",
		name, runtime.GOMAXPROCS(0), n, float64(time.Second)/perSec, perSec,
		q.P50.Nanoseconds(), q.P99.Nanoseconds(), q.P999.Nanoseconds(), cpuPerOp, extra)
}
