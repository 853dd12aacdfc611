package bench

import (
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests need neither nutcracker nor perf: running twemproxy is a
// bench-only path (make bench, lockbench -only twemproxy), which fails with
// the install command when nutcracker is missing.

func TestTwemproxyConfig(t *testing.T) {
	got := twemproxyConfig("127.0.0.1:7000", "127.0.0.1:7001")
	for _, want := range []string{"lockbench:\n", "  listen: 127.0.0.1:7000\n", "  redis: true\n", "  preconnect: true\n",
		"  auto_eject_hosts: false\n", "  server_connections: 1\n", "  servers:\n   - 127.0.0.1:7001:1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\t") {
		t.Errorf("YAML with a tab:\n%s", got)
	}
}

// TestFindNutcrackerMissing: without the binary the error names the
// package to install.
func TestFindNutcrackerMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findNutcracker(filepath.Join(t.TempDir(), "nutcracker"))
	if !errors.Is(err, errNoNutcracker) || !strings.Contains(err.Error(), "apt-get install nutcracker") {
		t.Fatalf("findNutcracker = %v, want an error naming `apt-get install nutcracker`", err)
	}
	bin := filepath.Join(t.TempDir(), "nutcracker")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findNutcracker(bin); err != nil || got != bin {
		t.Errorf("findNutcracker(%s) = %q, %v", bin, got, err)
	}
}

// TestTwemproxyOnlyInScenario1: twemproxy runs in scenario 1 when both the
// target and the twemproxy scenario are selected, never in the Go
// workloads.
func TestTwemproxyOnlyInScenario1(t *testing.T) {
	all := Config{}.withDefaults()
	if !all.measuresTwemproxy() {
		t.Error("the default configuration does not measure twemproxy")
	}
	for _, tg := range all.loadTargets() {
		if tg == Twemproxy {
			t.Error("twemproxy among the Go workload targets")
		}
	}
	for _, c := range []Config{
		{Targets: []Target{Direct, Lockproxy}},
		{Scenarios: []string{ScenarioRedisBenchmark}},
	} {
		if c.withDefaults().measuresTwemproxy() {
			t.Errorf("%+v measures twemproxy", c)
		}
	}
	r := &runner{cfg: Config{Scenarios: []string{ScenarioTwemproxy}}.withDefaults(), c: &cluster{}}
	if got := r.redisBenchmarkTargets(); len(got) != 3 || got[0] != Direct || got[1] != Twemproxy || got[2] != Lockproxy {
		t.Errorf("scenario 1 targets = %v, want direct, twemproxy, lockproxy", got)
	}
	// With lockproxy on one master running, it comes last.
	r.c.one = &proxyProc{}
	if got := r.redisBenchmarkTargets(); len(got) != 4 || got[3] != LockproxyOne {
		t.Errorf("scenario 1 targets = %v, want lockproxy1 last", got)
	}
	r.c.floor = &proxyProc{}
	if got := r.redisBenchmarkTargets(); len(got) != 5 || got[4] != Floor {
		t.Errorf("scenario 1 targets = %v, want floor last", got)
	}
}

// TestFanOutSplit: lockproxy on one master against twemproxy is the same
// job; what lockproxy on all masters costs beyond it, per further master,
// is the fan-out, and the report and the check say both.
func TestFanOutSplit(t *testing.T) {
	res := &Results{Config: Config{Rounds: 3, Masters: 5}.withDefaults()}
	run := func(tg Target, round int, proxyUs, sysUs float64) RedisBenchResult {
		cpu := CPU{Proxy: time.Duration(proxyUs * 1000 * float64(time.Microsecond)), ProxySys: time.Duration(sysUs * 1000 * float64(time.Microsecond))}
		return RedisBenchResult{Target: tg, Pipeline: 16, Round: round, Requests: 1000, RPS: 1, CPU: cpu}
	}
	// Rounds: twemproxy 2, lockproxy on 5 masters 3.2, on 1 master 1.6
	// (0.8x); each further master (3.2-1.6)/4 = 0.4, of which kernel
	// (1.0-0.6)/4 = 0.1; to match, each could cost (2-1.6)/4 = 0.1.
	for i := 1; i <= 3; i++ {
		res.RedisBench = append(res.RedisBench, run(Twemproxy, i, 2, 0.8), run(Lockproxy, i, 3.2, 1.0), run(LockproxyOne, i, 1.6, 0.6))
	}
	f, ok := res.fanOut(16)
	if !ok {
		t.Fatal("no split with all three measured")
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(f.oneRatio, 0.8) || !near(f.perMaster, 0.4) || !near(f.pmSys, 0.1) || !near(f.pmUser, 0.3) || !near(f.parityBudget, 0.1) {
		t.Errorf("split %+v", f)
	}
	if _, ok := res.fanOut(1); ok {
		t.Error("a split at -P 1, which was not measured")
	}
	// lockproxy1 and twemproxy never in the same round: no ratio, no
	// split (an empty median would read 0.00x).
	apart := &Results{Config: res.Config}
	for i := 1; i <= 3; i++ {
		apart.RedisBench = append(apart.RedisBench, run(Twemproxy, i, 2, 0.8), run(Lockproxy, i, 3.2, 1.0), run(LockproxyOne, i+10, 1.6, 0.6))
	}
	if f, ok := apart.fanOut(16); ok {
		t.Errorf("a split (lockproxy1 %.2fx twemproxy) without a round that measured both", f.oneRatio)
	}
	cs := res.proxyCPUChecks()
	if !strings.Contains(cs[1].Value, "lockproxy on 1 master 1.60 µs, 0.80× twemproxy's: the rest comes with the other masters, 0.40 µs per further master") {
		t.Errorf("-P 16 check: %q", cs[1].Value)
	}
	var b strings.Builder
	res.Markdown(&b, "test")
	for _, want := range []string{"**Where the difference is.**", "| 16 | 2.00 | 1.60 | 0.80× | 3.20 | 0.40 (user 0.30, kernel 0.10) | 0.10 |",
		"| 16 | lockproxy1 | 1 |", "lockproxy → 1 master |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestParsePerfCSV(t *testing.T) {
	out := "# started on Mon Nov 23 14:57:54 2026\n\n164,,syscalls:sys_enter_write,6423638,100.00,,\n" +
		"<not counted>,,syscalls:sys_enter_futex,0,100.00,,\n98,,context-switches,6423638,100.00,,Events disabled\nEvents enabled\n"
	got, err := parsePerfCSV(out)
	if err != nil || len(got) != 3 || got[0] != 164 || got[1] != 0 || got[2] != 98 {
		t.Errorf("parsePerfCSV = %v, %v; want [164 0 98]", got, err)
	}
	if _, err := parsePerfCSV("<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n"); !errors.Is(err, errPerfNoCounts) {
		t.Errorf("nothing counted: %v, want errPerfNoCounts", err)
	}
	if _, err := parsePerfCSV("<not supported>,,cycles,0,100.00,,\n"); err == nil {
		t.Error("no error for an unsupported event")
	}
}

func TestParseNetTCP(t *testing.T) {
	in := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n" +
		"   1: 0100007F:A000 0100007F:1B59 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n"
	socks := map[string]tcpSocket{}
	parseNetTCP(in, socks)
	if len(socks) != 2 || !socks["111"].listening || socks["222"].listening || socks["222"].remotePort != 7001 {
		t.Errorf("parseNetTCP = %+v", socks)
	}
}

// TestReadProxyFds: this process plays the proxy, with one connection to a
// "master" and one accepted from a "client".
func TestReadProxyFds(t *testing.T) {
	master, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	toMaster, err := net.Dial("tcp", master.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer toMaster.Close()
	client, err := net.Dial("tcp", front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	accepted, err := front.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	time.Sleep(10 * time.Millisecond) // the master's side of the accept queue
	fds, clients, err := readProxyFds(os.Getpid(), []string{master.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	// toMaster is a master connection. Both ends of the client connection
	// are in this process and neither has a master's port as its peer; the
	// master listener's unaccepted end is not ours.
	if len(fds.master) != 1 || clients != 2 || len(fds.all) < 5 {
		t.Errorf("readProxyFds: master fds %v, clients %d, all %v; want 1 master fd, 2 clients", fds.master, clients, fds.all)
	}
	events := profileEvents(fds)
	if want := 1 + 2*len(ioCalls) + len(profiledCalls) + 1; len(events) != want {
		t.Fatalf("%d events, want %d", len(events), want)
	}
	if f := events[2].filter; f != "fd == "+strconv.Itoa(fds.master[0]) {
		t.Errorf("master filter %q", f)
	}
	if f := events[1].filter; !strings.Contains(f, "fd != "+strconv.Itoa(fds.master[0])) || !strings.Contains(f, " && ") {
		t.Errorf("client filter %q should exclude every descriptor open before the run", f)
	}
}

func TestProxyProfileFill(t *testing.T) {
	// Total, then client/master of read, readv, write, writev, then each
	// of profiledCalls, then context switches.
	counts := []int64{1000, 100, 20, 0, 0, 100, 20, 0, 0}
	named := map[string]int64{"read": 130, "write": 125, "epoll_wait": 50, "epoll_ctl": 300, "futex": 5}
	for _, c := range profiledCalls {
		counts = append(counts, named[c])
	}
	counts = append(counts, 42)
	p := ProxyProfile{Requests: 100}
	if err := p.fill(counts); err != nil {
		t.Fatal(err)
	}
	if p.Client != (Syscalls{100, 100}) || p.Master != (Syscalls{20, 20}) || p.Other != (Syscalls{10, 5}) {
		t.Errorf("client %+v master %+v other %+v", p.Client, p.Master, p.Other)
	}
	if p.Calls["other"] != 1000-130-125-50-300-5 || p.ContextSwitches != 42 || p.PerReq(p.Total) != 10 {
		t.Errorf("calls %v, context switches %d", p.Calls, p.ContextSwitches)
	}
	if err := p.fill(counts[1:]); err == nil {
		t.Error("no error for a short count list")
	}
}

// TestProxyCPUChecks: the comparison is the median of the rounds' ratios
// of proxy CPU per request, each proxy's µs shown.
func TestProxyCPUChecks(t *testing.T) {
	res := &Results{Config: Config{Rounds: 3}.withDefaults()}
	run := func(tg Target, p, round int, proxyUs float64) RedisBenchResult {
		cpu := CPU{Proxy: time.Duration(proxyUs * 1000 * float64(time.Microsecond)), ProxySys: time.Millisecond}
		return RedisBenchResult{Target: tg, Pipeline: p, Round: round, Requests: 1000, RPS: 1, CPU: cpu}
	}
	for i, us := range [][2]float64{{10, 12}, {10, 9}, {8, 10}} { // ratios 1.20, 0.90, 1.25
		res.RedisBench = append(res.RedisBench, RedisBenchResult{Target: Direct, Pipeline: 1, Round: i + 1, RPS: 1, CPU: CPU{Proxy: -1}},
			run(Twemproxy, 1, i+1, us[0]), run(Lockproxy, 1, i+1, us[1]))
	}
	for i, us := range [][2]float64{{2, 1.8}, {2, 2}} { // ratios 0.90, 1.00
		res.RedisBench = append(res.RedisBench, run(Twemproxy, 16, i+1, us[0]), run(Lockproxy, 16, i+1, us[1]))
	}
	cs := res.proxyCPUChecks()
	if len(cs) != 2 {
		t.Fatalf("%d checks, want 2", len(cs))
	}
	if c := cs[0]; c.Pass || !strings.HasPrefix(c.Value, "1.20× (median of 3 rounds: 1.20, 0.90, 1.25); lockproxy 10.00 (12.00, 9.00, 10.00), twemproxy 10.00 (10.00, 10.00, 8.00) µs") {
		t.Errorf("-P 1: %+v, want a failure on the median 1.20", c)
	}
	if c := cs[1]; !c.Pass || !strings.HasPrefix(c.Value, "0.95× (median of 2 rounds: 0.90, 1.00)") {
		t.Errorf("-P 16: %+v, want a pass on 0.95", c)
	}
	if !strings.Contains(cs[0].What, "-P 1,") || !strings.Contains(cs[1].What, "-P 16,") {
		t.Errorf("checks %q, %q", cs[0].What, cs[1].What)
	}
	// The checks are among the targets, after the req/s ratios of
	// scenario 1, and the report has the section.
	all := res.Checks()
	if !strings.Contains(all[2].What, "proxy CPU") || !strings.Contains(all[3].What, "proxy CPU") {
		t.Errorf("targets: %q, %q", all[2].What, all[3].What)
	}
	var b strings.Builder
	res.Markdown(&b, "test")
	for _, want := range []string{"## 1b. Proxy CPU per request", "| 1 | **proxy CPU µs/req** | – | **10.00** | **10.00** |",
		"BenchmarkTwemproxy/redis-benchmark/c=0/P=16-", "proxy-cpu-ns/op",
		"- **-P 1**: lockproxy 10.00 µs/request (user 9.00, kernel 1.00) against twemproxy's 10.00 (user 9.00, kernel 1.00)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestParsePerfScript: samples are sorted by the system call they were in,
// or by whose code ran in user space.
func TestParsePerfScript(t *testing.T) {
	out := `
	ffffffff81b1 tcp_sendmsg ([kernel.kallsyms])
	ffffffff81b2 ksys_write ([kernel.kallsyms])
	ffffffff81b3 do_syscall_64 ([kernel.kallsyms])
	ffffffff81b4 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
	          b34e internal/runtime/syscall/linux.Syscall6 (/tmp/lockproxy)
	          c480 github.com/lockproxy/lockproxy/internal/evloop.Write (/tmp/lockproxy)

	ffffffff81c1 do_epoll_wait ([kernel.kallsyms])
	ffffffff81c2 __x64_sys_epoll_pwait ([kernel.kallsyms])
	ffffffff81c5 srso_return_thunk ([kernel.kallsyms])
	ffffffff81c3 x64_sys_call ([kernel.kallsyms])
	ffffffff81c4 do_syscall_64 ([kernel.kallsyms])

	ffffffff81d1 finish_task_switch ([kernel.kallsyms])
	ffffffff81d2 exit_to_user_mode_loop ([kernel.kallsyms])
	ffffffff81d3 do_syscall_64 ([kernel.kallsyms])

	ffffffff81e1 clear_page_erms ([kernel.kallsyms])
	ffffffff81e2 asm_exc_page_fault ([kernel.kallsyms])

	          1000 runtime.memmove (/tmp/lockproxy)
	          2000 github.com/lockproxy/lockproxy/quorum.(*Request).complete (/tmp/lockproxy)

	          1000 runtime.scanObject (/tmp/lockproxy)
	          2000 runtime.gcDrain (/tmp/lockproxy)
	          3000 runtime.gcBgMarkWorker (/tmp/lockproxy)

	          1000 runtime.findRunnable (/tmp/lockproxy)
	          2000 runtime.schedule (/tmp/lockproxy)

	          1000 github.com/lockproxy/lockproxy/proxy.(*loopClient).github.com/lockproxy/lockproxy/internal/evloop.kicked (/tmp/lockproxy)

	         3f190 __GI___writev (/usr/lib/x86_64-linux-gnu/libc.so.6)

	         11a2b msg_parse (/usr/sbin/nutcracker)
	         11a2b [unknown] ([unknown])
`
	p := parsePerfScript([]byte(out))
	want := map[string]int{"kernel: write": 1, "kernel: epoll_wait": 1, catReturn: 1, catInterrupts: 1, "user: quorum": 1,
		catGC: 1, catRuntime: 1, "user: proxy": 1, catLibc: 1, "user: nutcracker": 1}
	if p.Samples != 10 || len(p.ByCat) != len(want) {
		t.Fatalf("%d samples in %v, want 10 in %v", p.Samples, p.ByCat, want)
	}
	for c, n := range want {
		if p.ByCat[c] != n {
			t.Errorf("%s: %d samples, want %d (all: %v)", c, p.ByCat[c], n, p.ByCat)
		}
	}
	if p.Share("kernel: write") != 0.1 || p.top(1) != "kernel: epoll_wait 10%" {
		t.Errorf("share %v, top %q (ties go by name)", p.Share("kernel: write"), p.top(1))
	}
}

// TestFloorSplit: the floor (the fan-out alone) against twemproxy says, at
// each depth, whether the target is reachable at all; the check and
// section 1c say which. A floor above twemproxy must not read as
// reachable (the negative control of the verdict).
func TestFloorSplit(t *testing.T) {
	res := &Results{Config: Config{Rounds: 3, Masters: 5}.withDefaults()}
	run := func(tg Target, p, round int, proxyUs, sysUs float64) RedisBenchResult {
		cpu := CPU{Proxy: time.Duration(proxyUs * 1000 * float64(time.Microsecond)), ProxySys: time.Duration(sysUs * 1000 * float64(time.Microsecond))}
		return RedisBenchResult{Target: tg, Pipeline: p, Round: round, Requests: 1000, RPS: 1, CPU: cpu}
	}
	// -P 1: twemproxy 9, floor 10 (kernel 9.5), lockproxy 10.5: the
	// fan-out alone is over. -P 16: twemproxy 1.4, floor 0.9 (kernel
	// 0.6), lockproxy 1.8 (kernel 0.6): reachable, lockproxy's own work
	// 0.9 above the floor where parity allows 0.5.
	for i := 1; i <= 3; i++ {
		res.RedisBench = append(res.RedisBench,
			run(Twemproxy, 1, i, 9, 8), run(Floor, 1, i, 10, 9.5), run(Lockproxy, 1, i, 10.5, 9),
			run(Twemproxy, 16, i, 1.4, 0.7), run(Floor, 16, i, 0.9, 0.6), run(Lockproxy, 16, i, 1.8, 0.6))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	f1, ok1 := res.floorAt(1)
	f16, ok16 := res.floorAt(16)
	if !ok1 || !ok16 {
		t.Fatal("no floor comparison with all three measured")
	}
	if !near(f1.ratio, 10.0/9) || !near(f16.ratio, 0.9/1.4) || !near(f16.allUser-f16.floorUser, 0.9) {
		t.Errorf("floor at -P 1 %+v, at -P 16 %+v", f1, f16)
	}
	cs := res.proxyCPUChecks()
	if !strings.Contains(cs[0].Value, "the fan-out alone (floor) 10.00 µs, 1.11× twemproxy's: no proxy that writes every request to 5 masters meets this depth's target here") {
		t.Errorf("-P 1 check: %q", cs[0].Value)
	}
	if !strings.Contains(cs[1].Value, "the fan-out alone (floor) 0.90 µs, 0.64× twemproxy's: reachable; lockproxy's own work above it 0.90 µs, parity allows 0.50") {
		t.Errorf("-P 16 check: %q", cs[1].Value)
	}
	var b strings.Builder
	res.Markdown(&b, "test")
	for _, want := range []string{"## 1c. The fan-out alone: the floor proxy",
		"| 1 | 9.00 | 10.00 (user 0.50, kernel 9.50) | 1.11× | 10.50 (user 1.50, kernel 9.00) | 0.50 (user 1.00, kernel -0.50) | -1.00 |",
		"- **-P 1: the fan-out alone costs more than twemproxy** (1.11×)",
		"- **-P 16: the fan-out alone costs less than twemproxy** (0.64×): the target is reachable",
		"| 16 | floor | 1 |", "floor → 5 masters |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Sets the floor's -P 1 figures, total and kernel, in every round.
	setFloor1 := func(us, sysUs float64) {
		for i := range res.RedisBench {
			if r := &res.RedisBench[i]; r.Target == Floor && r.Pipeline == 1 {
				r.CPU.Proxy = time.Duration(us * 1000 * float64(time.Microsecond))
				r.CPU.ProxySys = time.Duration(sysUs * 1000 * float64(time.Microsecond))
			}
		}
	}
	// A floor within the noise of twemproxy's figure is at the edge,
	// neither reachable nor ruled out.
	setFloor1(9.3, 9.5)
	if f, _ := res.floorAt(1); f.verdict() != floorEdgeOf {
		t.Errorf("floor at %.2fx twemproxy: verdict %d, want at the edge", f.ratio, f.verdict())
	}
	if got := res.floorCheckText(1); !strings.Contains(got, "1.03× twemproxy's: at the edge, parity leaves lockproxy's own work -0.30 µs where it uses 1.20") {
		t.Errorf("-P 1 check at the edge: %q", got)
	}
	b.Reset()
	res.Markdown(&b, "test")
	if !strings.Contains(b.String(), "- **-P 1: the fan-out alone costs about what twemproxy does** (1.03×") {
		t.Error("report lacks the edge verdict")
	}
	// Over twemproxy by more than the noise, but with less than
	// twemproxy's figure in the kernel: not "no proxy meets it" (the
	// negative control of floorAbove's kernel condition).
	setFloor1(10, 8)
	if f, _ := res.floorAt(1); f.verdict() != floorOver {
		t.Errorf("floor 10 (kernel 8) against twemproxy 9: verdict %d, want over but not in the kernel alone", f.verdict())
	}
	if got := res.floorCheckText(1); !strings.Contains(got, "1.11× twemproxy's, 8.00 µs of it in the kernel: only a fan-out that spends under 1.00 µs in user space, where the floor spends 2.00") {
		t.Errorf("-P 1 check, floor over in user space: %q", got)
	}
	b.Reset()
	res.Markdown(&b, "test")
	if !strings.Contains(b.String(), "but its kernel part, 8.00 µs, does not reach twemproxy's 9.00 in all: the target is out of reach of a proxy built like the floor on this machine, and within reach only of one that spends under 1.00 µs per request in user space") {
		t.Error("report lacks the over-in-user-space verdict")
	}
	// Floor and twemproxy measured, but never in the same round: no
	// round ratio, so no verdict (an empty median must not read as 0×,
	// "reachable").
	for i := range res.RedisBench {
		if r := &res.RedisBench[i]; r.Target == Floor && r.Pipeline == 1 {
			r.Round += 10
		}
	}
	if f, ok := res.floorAt(1); ok {
		t.Errorf("a floor verdict (ratio %.2f) without a round that measured floor and twemproxy", f.ratio)
	}
	// Without the floor measured, nothing is said of it.
	res.RedisBench = slices.DeleteFunc(res.RedisBench, func(r RedisBenchResult) bool { return r.Target == Floor })
	if _, ok := res.floorAt(16); ok || res.floorCheckText(16) != "" {
		t.Error("a floor comparison without floor runs")
	}
}
