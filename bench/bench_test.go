package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestRunDirect runs every scenario that does not need lockproxy against a
// direct master, briefly, and checks that the figures are sane and the report
// renders with its charts.
func TestRunDirect(t *testing.T) {
	if _, err := redisproc.Binary(); err != nil {
		t.Fatal(err) // a missing redis-server is an installation failure
	}
	d := time.Second
	if testing.Short() {
		d = 300 * time.Millisecond
	}
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Masters:  3,
		Rounds:   2,
		Duration: d,
		Warmup:   100 * time.Millisecond,
		Targets:  []Target{Direct},
		Dir:      t.TempDir(),
		Log:      &log,
	})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}

	if len(res.RedisBench) != 4 {
		t.Fatalf("got %d redis-benchmark runs, want 4 (-P 1 and -P 16, 2 rounds)", len(res.RedisBench))
	}
	for _, r := range res.RedisBench {
		if r.RPS <= 0 || r.Lat.P50 <= 0 || r.Lat.P50 > r.Lat.P99 || r.Lat.P99 > r.Lat.P999 {
			t.Errorf("redis-benchmark -P %d: implausible %+v", r.Pipeline, r)
		}
		if r.CPU.Client <= 0 {
			t.Errorf("redis-benchmark -P %d: no client CPU measured", r.Pipeline)
		}
	}
	if len(res.AcquireRelease) != 4 || len(res.HotKey) != 1 {
		t.Fatalf("got %d acquire-release and %d hot-key runs, want 4 (16 and 64 workers, 2 rounds) and 1", len(res.AcquireRelease), len(res.HotKey))
	}
	for i, r := range res.AcquireRelease {
		if want := i%2 + 1; r.Round != want {
			t.Errorf("acquire-release run %d (workers %d) is round %d, want %d", i, r.Workers, r.Round, want)
		}
	}
	if res.Degraded != nil {
		t.Error("degraded ran without lockproxy")
	}
	for _, r := range append(res.AcquireRelease, res.HotKey...) {
		q := r.Lat.Summary()
		if r.Ops <= 0 || r.Throughput() <= 0 || r.Errors != 0 {
			t.Errorf("%s workers=%d: ops %d, errors %d (%s)", r.Target, r.Workers, r.Ops, r.Errors, r.FirstErr)
		}
		if q.P50 <= 0 || q.P50 > q.P99 || q.P99 > q.P999 || q.P999 > q.Max {
			t.Errorf("%s workers=%d: quantiles out of order: %+v", r.Target, r.Workers, q)
		}
		if len(r.Lat) < int(r.Ops) {
			t.Errorf("%s workers=%d: %d latencies for %d ops", r.Target, r.Workers, len(r.Lat), r.Ops)
		}
		if r.CPU.Client <= 0 || r.CPU.MastersTotal() <= 0 || r.CPU.Proxy != -1 {
			t.Errorf("%s workers=%d: CPU %+v", r.Target, r.Workers, r.CPU)
		}
	}

	dir := t.TempDir()
	report, err := res.WriteReport(dir, "go test ./bench")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BenchmarkDirect/acquire-release/workers=64-", "BenchmarkDirect/redis-benchmark/c=50/P=16-",
		"BenchmarkDirect/hotkey/workers=64-", "## Targets", "not measured"} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, f := range []string{ReportFile, ThroughputPNG, LatencyCDFPNG} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestParseRedisBenchmark(t *testing.T) {
	out := "SET key:__rand_int__ val NX PX 10000: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r" +
		"SET key:__rand_int__ val NX PX 10000: rps=401234.0 (overall: 400000.0) avg_msec=1.8 (overall: 1.8)\r" +
		`====== SET key:__rand_int__ val NX PX 10000 ======
  20000 requests completed in 0.05 seconds
  50 parallel clients

Latency by percentile distribution:
0.000% <= 0.791 milliseconds (cumulative count 16)
50.000% <= 1.743 milliseconds (cumulative count 10000)
99.805% <= 4.287 milliseconds (cumulative count 19968)
99.902% <= 4.319 milliseconds (cumulative count 19984)
100.000% <= 4.335 milliseconds (cumulative count 20000)

Cumulative distribution of latencies:
0.000% <= 0.103 milliseconds (cumulative count 0)
100.000% <= 5.103 milliseconds (cumulative count 20000)

Summary:
  throughput summary: 400000.00 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        1.813     0.784     1.743     2.695     4.095     4.335
`
	var r RedisBenchResult
	if err := parseRedisBenchmark([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	want := Quantiles{P50: ms(1.743), P99: ms(4.095), P999: ms(4.319), Max: ms(4.335)}
	if r.RPS != 400000 || r.Lat != want {
		t.Errorf("got rps %v lat %+v, want 400000 %+v", r.RPS, r.Lat, want)
	}
	if err := parseRedisBenchmark([]byte("Could not connect to Redis at 127.0.0.1:1: Connection refused\n"), &r); err == nil {
		t.Error("no error for output without a summary")
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, utime 250 and stime 50
	// ticks (fields 14 and 15).
	line := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 12345 0 0"
	got, err := parseStat([]byte(line))
	if want := (procTimes{2500 * time.Millisecond, 500 * time.Millisecond}); err != nil || got != want || got.total() != 3*time.Second {
		t.Errorf("parseStat = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("no error for a short line")
	}
	self, err := procCPU(os.Getpid())
	if err != nil || self.user < 0 || self.sys < 0 {
		t.Errorf("procCPU(self) = %v, %v", self, err)
	}
}

func TestParseIO(t *testing.T) {
	in := "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 3\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
	got, err := parseIO([]byte(in))
	if want := (Syscalls{Reads: 10, Writes: 3}); err != nil || got != want {
		t.Errorf("parseIO = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseIO([]byte("rchar: 1\n")); err == nil {
		t.Error("no error without syscr/syscw")
	}
	// Our own reads of /proc count: the figure moves.
	a, err := procIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := procIO(os.Getpid())
	if b.Reads <= a.Reads {
		t.Errorf("procIO(self): reads %d then %d, want growth (the read of /proc/self/io is one)", a.Reads, b.Reads)
	}
}

func TestQuantile(t *testing.T) {
	var l Latencies
	if l.Quantile(0.5) != 0 || l.Summary() != (Quantiles{}) {
		t.Error("empty latencies should give zero quantiles")
	}
	parts := [][]time.Duration{{5, 1, 3}, {2, 4}, nil, {10, 9, 8, 7, 6}}
	l = mergeLatencies(parts)
	for q, want := range map[float64]time.Duration{0: 1, 0.1: 1, 0.5: 5, 0.9: 9, 0.99: 10, 1: 10} {
		if got := l.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	ms, frac := l.cdfPoints(4)
	if len(ms) != len(frac) || frac[len(frac)-1] != 1 {
		t.Errorf("cdfPoints: %v %v", ms, frac)
	}
}

func TestProxyConfig(t *testing.T) {
	got := proxyConfig("127.0.0.1:7000", []string{"127.0.0.1:1", "127.0.0.1:2"}, 50*time.Millisecond)
	for _, want := range []string{`listen = "127.0.0.1:7000"`, `metrics_listen = ""`, `masters = ["127.0.0.1:1", "127.0.0.1:2"]`,
		`node_timeout = "50ms"`, `bootstrap = true`, "[quorum]"} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
}

// TestChecksJudgeTheMedianRound: with several rounds, a comparison is the
// median of the rounds' ratios (each round's runs paired), not one lucky or
// unlucky run, and every round's ratio is shown.
func TestChecksJudgeTheMedianRound(t *testing.T) {
	res := &Results{Config: Config{Rounds: 3}.withDefaults()}
	for i, rps := range [][2]float64{{100, 40}, {100, 60}, {80, 41}} { // ratios 0.40, 0.60, 0.5125
		res.RedisBench = append(res.RedisBench,
			RedisBenchResult{Target: Direct, Pipeline: 1, Round: i + 1, RPS: rps[0]},
			RedisBenchResult{Target: Lockproxy, Pipeline: 1, Round: i + 1, RPS: rps[1]})
	}
	// Round 3 of -P 16 lacks its lockproxy run: two ratios, 0.20 and 0.40.
	for i, rps := range [][2]float64{{100, 20}, {100, 40}, {100, 0}} {
		res.RedisBench = append(res.RedisBench, RedisBenchResult{Target: Direct, Pipeline: 16, Round: i + 1, RPS: rps[0]})
		if rps[1] > 0 {
			res.RedisBench = append(res.RedisBench, RedisBenchResult{Target: Lockproxy, Pipeline: 16, Round: i + 1, RPS: rps[1]})
		}
	}
	cs := res.Checks()
	if c := cs[0]; !c.Pass || c.Value != "0.51× (median of 3 rounds: 0.40, 0.60, 0.51)" {
		t.Errorf("-P 1: %+v, want a pass on the median 0.51", c)
	}
	if c := cs[1]; !c.Pass || c.Value != "0.30× (median of 2 rounds: 0.20, 0.40)" {
		t.Errorf("-P 16: %+v, want a pass on the mean of the two rounds that have both runs", c)
	}
	if got := res.findRedisBench(Lockproxy, 1); got == nil || got.Round != 3 {
		t.Errorf("findRedisBench = %+v, want the median round (3, 41 req/s)", got)
	}
	if c := cs[2]; c.Measured() {
		t.Errorf("acquire+release without runs: %+v, want not measured", c)
	}
}

// TestRedisBenchmarkNoQuorumHint: a run that redis-benchmark stops on
// lockproxy's NOQUORUM says what to do about it (a longer node_timeout);
// any other failed run does not.
func TestRedisBenchmarkNoQuorumHint(t *testing.T) {
	for _, tc := range []struct {
		reply string
		hint  bool
	}{
		{"NOQUORUM 2 of 5 masters answered, 3 needed (master 127.0.0.1:1: no reply within node_timeout)", true},
		{"ERR something else", false},
	} {
		m := fakemaster.Start(t)
		m.On("SET").Error(tc.reply)
		_, err := runRedisBenchmark(context.Background(), m.Addr(), 1, 1, 10, 10, "hint:", &cpuMeter{}, 10*time.Second)
		if err == nil {
			t.Fatalf("%s: redis-benchmark succeeded against error replies", tc.reply)
		}
		if got := strings.Contains(err.Error(), "BENCHFLAGS=-node-timeout="); got != tc.hint {
			t.Errorf("%s: hint %v, want %v, in: %v", tc.reply, got, tc.hint, err)
		}
	}
}
