package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestClassifyRefusals: each measure counts the refusals that meet none of
// its holds, and the masters' truth is compared with each.
func TestClassifyRefusals(t *testing.T) {
	logs := []contentionLog{{
		holds: []holding{
			// Upper [12,18], Estimate [11,19], Lower [10,20].
			{key: 0, token: 1, sent: ms(10), reply: ms(12), releaseSent: ms(18), released: ms(20)},
			// Upper [50,58], Estimate [45,59], Lower [40,60].
			{key: 0, token: 2, sent: ms(40), reply: ms(50), releaseSent: ms(58), released: ms(60)},
			{key: 1, token: 3, sent: ms(0), reply: ms(1), releaseSent: ms(99), released: ms(100)},
			// The masters' record has no quorum for it: unbacked.
			{key: 1, token: 4, sent: ms(150), reply: ms(151), releaseSent: ms(152), released: ms(153)},
		},
		attempts: []attempt{
			{key: 0, sent: ms(14), reply: ms(15), outcome: refused},   // held, every way
			{key: 0, sent: ms(19), reply: ms(21), outcome: refused},   // free for Upper only
			{key: 0, sent: ms(25), reply: ms(30), outcome: refused},   // free, every way
			{key: 0, sent: ms(42), reply: ms(44), outcome: refused},   // held for Lower only
			{key: 1, sent: ms(25), reply: ms(30), outcome: refused},   // key 1 is held
			{key: 0, sent: ms(25), reply: ms(30), outcome: granted},   // counted, not refused
			{key: 0, sent: ms(2), reply: ms(3), outcome: refused},     // before the window
			{key: 0, sent: ms(195), reply: ms(205), outcome: refused}, // after it
		},
	}, {
		attempts: []attempt{
			{key: 0, sent: ms(70), reply: ms(80), outcome: unknown}, // may hold key 0 for the TTL: Lower
			{key: 0, sent: ms(85), reply: ms(86), outcome: errored}, // NOQUORUM: not counted
			{key: 0, sent: ms(90), reply: ms(91), outcome: refused},
		},
	}}
	got := classify(logs, 2, ms(5), ms(200), nil, nil)
	want := Refusals{Attempts: 7, Refused: 6, Free: [numMeasures]int64{Estimate: 3, Upper: 4, Lower: 1}}
	if got != want {
		t.Errorf("classify = %+v, want %+v", got, want)
	}

	quorum := [][]quorumHold{
		{{span{ms(11), ms(19)}, 1}, {span{ms(47), ms(59)}, 2}},
		{{span{ms(0) + time.Millisecond/2, ms(99)}, 3}},
	}
	got = classify(logs, 2, ms(5), ms(200), quorum, nil)
	want.Truth, want.TruthFree, want.Unbacked = true, 3, 1
	want.FreeWait = ms(2) // of 5, 2 and 1 ms
	want.TooMany = [numMeasures]int64{Upper: 1}
	want.TooFew = [numMeasures]int64{Lower: 2}
	if got != want {
		t.Errorf("classify with the truth = %+v, want %+v", got, want)
	}
}

func TestUnionMeets(t *testing.T) {
	u := union([]span{{5, 6}, {0, 2}, {2, 3}, {10, 12}, {11, 11}})
	if want := []span{{0, 3}, {5, 6}, {10, 12}}; !slices.Equal(u, want) {
		t.Fatalf("union = %v, want %v", u, want)
	}
	for _, c := range []struct {
		a, b time.Duration
		want bool
	}{{-1, -1, false}, {3, 4, true}, {4, 4, false}, {4, 5, true}, {7, 9, false}, {12, 20, true}, {13, 20, false}} {
		if got := meets(u, c.a, c.b); got != c.want {
			t.Errorf("meets(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestParseMonitorLine(t *testing.T) {
	at := time.Unix(1700000000, 123000)
	for _, c := range []struct {
		line string
		want monitorEvent
		ok   bool
	}{
		{`+1700000000.000123 [0 127.0.0.1:5000] "SET" "lb7:12" "abc" "NX" "PX" "10000"` + "\r\n", monitorEvent{at: at, key: 12, token: 10*36*36 + 11*36 + 12}, true},
		{`+1700000000.000123 [0 lua] "DEL" "lb7:1"` + "\r\n", monitorEvent{at: at, key: 1, del: true}, true},
		{`+1700000000.000123 [0 lua] "del" "lb7:1"`, monitorEvent{at: at, key: 1, del: true}, true},
		{`+1700000000.000123 [0 127.0.0.1:5000] "SET" "lb7:1" "abc" "PX" "10000"`, monitorEvent{}, false},      // no NX
		{`+1700000000.000123 [0 127.0.0.1:5000] "SET" "lb8:1" "abc" "NX" "PX" "10000"`, monitorEvent{}, false}, // another run
		{`+1700000000.000123 [0 lua] "GET" "lb7:1"`, monitorEvent{}, false},
		{`+1700000000.000123 [0 127.0.0.1:5000] "EVALSHA" "0123" "1" "lb7:1" "abc"`, monitorEvent{}, false},
		{`+1700000000.000123 [1 lua] "GET" "lockproxy:marker"`, monitorEvent{}, false},
		{`+OK`, monitorEvent{}, false},
	} {
		got, ok := parseMonitorLine([]byte(c.line), []byte("lb7:"))
		if ok != c.ok || (ok && (!got.at.Equal(c.want.at) || got.key != c.want.key || got.del != c.want.del || got.token != c.want.token)) {
			t.Errorf("%s: got %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// TestQuorumHolds replays 5 masters: a token holds the lock while it is on
// 3 of them, and a SET NX on a master that holds another token changes
// nothing.
func TestQuorumHolds(t *testing.T) {
	start := time.Unix(1700000000, 0)
	at := func(n int) time.Time { return start.Add(ms(n)) }
	set := func(n int, tok uint64) monitorEvent { return monitorEvent{at: at(n), token: tok} }
	del := func(n int) monitorEvent { return monitorEvent{at: at(n), del: true} }
	const a, b = 7, 8
	events := [][]monitorEvent{
		{set(1, a)},
		{set(2, a)},
		{set(3, b), del(6), set(7, a)},
		{set(4, b), set(8, a)}, // still holds b
		{set(5, b)},
	}
	got := quorumHolds(events, 1, 3, start)
	want := []quorumHold{{span{ms(5), ms(6)}, b}, {span{ms(7), time.Duration(1<<63 - 1)}, a}}
	if !slices.Equal(got[0], want) {
		t.Errorf("quorumHolds = %v, want %v", got[0], want)
	}
}

func TestDrained(t *testing.T) {
	info := "# Quorum\r\nmaster3:addr=127.0.0.1:1,state=up,latency_ms=0.1,queued=0,inflight=0,quarantined_until=,last_error_at=,last_error=\r\n" +
		"master4:addr=127.0.0.1:2,state=up,latency_ms=,queued=12,inflight=0,quarantined_until=,last_error_at=,last_error=\r\n"
	if !drained(info, "master3:") || drained(info, "master4:") || drained(info, "master1:") {
		t.Error("drained misreads INFO quorum")
	}
}

// TestMultiProxyReport: the checks judge the median round of 3 proxies
// (and of 3 with a master paused) against 1%, show the 1-proxy control for
// information, and every run has its benchstat line.
func TestMultiProxyReport(t *testing.T) {
	res := &Results{Config: Config{Rounds: 3}.withDefaults()}
	for round, free := range []int64{1, 30, 5} { // of 1000 refused: 0.1%, 3%, 0.5%
		for _, v := range []struct {
			proxies int
			paused  bool
		}{{1, false}, {3, false}, {3, true}} {
			r := MultiProxyResult{Proxies: v.proxies, Paused: v.paused, Round: round + 1, Workers: 32, Keys: 2, Elapsed: time.Second,
				Acquisitions: 500, Lat: Latencies{time.Millisecond},
				Refusals: Refusals{Attempts: 1500, Refused: 1000, Truth: true, TruthFree: free, Why: [numCauses]int64{free / 3, free / 3, free - 2*(free/3)}, Unreachable: 4, FreeWait: ms(50),
					Leftovers: 7, LeftoversResent: 6}, Stats: ProxyStats{SplitRetries: 40, UndoSent: 90, UndoUnconfirmed: 8}, Load: 0.7}
			if v.proxies == 1 {
				r.TruthFree = 0
			}
			if v.paused {
				r.TruthFree *= 4 // 0.4%, 12%, 2%: median 2%
			}
			res.MultiProxy = append(res.MultiProxy, r)
		}
	}
	cs := res.multiProxyChecks()
	if len(cs) != 4 {
		t.Fatalf("%d checks, want 4", len(cs))
	}
	if c := cs[0]; !c.Info || !strings.HasPrefix(c.Value, "0.000%") {
		t.Errorf("control: %+v", c)
	}
	if c := cs[1]; !c.Pass || !strings.HasPrefix(c.Value, "0.500% (median of 3 rounds: 0.100%, 3.000%, 0.500%)") {
		t.Errorf("3 proxies: %+v, want a pass on the median 0.5%%", c)
	}
	if c := cs[2]; c.Measured() {
		t.Errorf("1 proxy, 1 paused, not run: %+v", c)
	}
	if c := cs[3]; c.Pass || !strings.HasPrefix(c.Value, "2.000%") {
		t.Errorf("3 proxies, 1 paused: %+v, want a failure on the median 2%%", c)
	}
	var b bytes.Buffer
	res.Markdown(&b, "test")
	for _, want := range []string{"## 5. Several lockproxies on one master set", "| 3 | yes | 2 | 0.7 | 500 |",
		"| 3 | no | 2 | 30 | 10 | 10 | 10 | 4 | 50.0 | 7 (6) | 40 | 90 | 8 |",
		"BenchmarkLockproxy/multiproxy/proxies=3/paused=1/workers=32/keys=2-", "12.0000 refused-free-%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestGrantedHolds: a hold is the quorum of the granted token that began
// during its granting attempt; the same token's quorums at other times
// (an earlier refused attempt applied late, a stalled master's late SET NX
// after the release began) are not holds, but a dip below a quorum before
// the +OK is part of the hold.
func TestGrantedHolds(t *testing.T) {
	logs := []contentionLog{{holds: []holding{
		{key: 0, token: 1, sent: ms(10), reply: ms(12), releaseSent: ms(18), released: ms(20)},
		{key: 0, token: 2, sent: ms(30), reply: ms(31), releaseSent: ms(32), released: ms(33)}, // no quorum in [30, 31]
		{key: 1, token: 3, sent: ms(10), reply: ms(12), releaseSent: ms(18), released: ms(20)},
		{key: 1, token: 4, sent: ms(40), reply: ms(43), releaseSent: ms(45), released: ms(51)},
	}}}
	quorum := [][]quorumHold{{
		{span{ms(5), ms(6)}, 1},   // an earlier attempt of token 1
		{span{ms(11), ms(19)}, 1}, // its grant
		{span{ms(25), ms(26)}, 1}, // a late SET NX after its release
		{span{ms(34), ms(35)}, 2}, // after token 2's +OK: does not back it
	}, {
		{span{ms(11), ms(15)}, 3}, // below a quorum before its release: cut short
		{span{ms(41), ms(42)}, 4}, // a dip below a quorum before the +OK
		{span{ms(42) + time.Millisecond/2, ms(50)}, 4},
	}}
	held, unbacked, unowned, cut := grantedHolds(logs, quorum)
	want := [][]span{{{ms(11), ms(19)}}, {{ms(11), ms(15)}, {ms(41), ms(50)}}}
	if !slices.Equal(held[0], want[0]) || !slices.Equal(held[1], want[1]) || unbacked != 1 || unowned != 3 || cut != 1 {
		t.Errorf("grantedHolds = %v, %d unbacked, %d unowned, %d cut short; want %v, 1, 3, 1", held, unbacked, unowned, cut, want)
	}
}

// TestOverlaps: two holders of a key at once, by the workers' clock.
func TestOverlaps(t *testing.T) {
	logs := []contentionLog{{holds: []holding{
		{key: 0, reply: ms(1), releaseSent: ms(5)},
		{key: 0, reply: ms(6), releaseSent: ms(9)},
		{key: 1, reply: ms(1), releaseSent: ms(9)},
	}}, {holds: []holding{
		{key: 0, reply: ms(8), releaseSent: ms(10)}, // while the second holds
		{key: 1, reply: ms(10), releaseSent: ms(11)},
	}}}
	if n := overlaps(logs, 2); n != 1 {
		t.Errorf("overlaps = %d, want 1", n)
	}
}

// TestRunMultiProxy runs the multiproxy scenario briefly with 2 lockproxies
// on 3 masters: every variant ran, the masters' MONITOR record backs every
// +OK (the replay matches real redis-server output), and no two workers held
// a key at once.
func TestRunMultiProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lockproxy and runs it on real masters")
	}
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Masters: 3, Rounds: 1, Duration: 400 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Scenarios: []string{ScenarioMultiProxy}, Targets: []Target{Lockproxy},
		MultiProxies: 2, MultiWorkers: 8,
		Dir: t.TempDir(), Log: &log,
	})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.MultiProxy {
		got = append(got, r.variant())
		if !r.Truth || r.Unbacked != 0 || r.Overlaps != 0 || r.Attempts == 0 {
			t.Errorf("%s: %+v", r.variant(), r.Refusals)
		}
		if !r.Paused && r.Acquisitions == 0 {
			t.Errorf("%s: no acquisition (%s)", r.variant(), r.FirstErr)
		}
	}
	if want := []string{"proxies=1", "proxies=2", "proxies=1/paused=1", "proxies=2/paused=1"}; !slices.Equal(got, want) {
		t.Errorf("variants %v, want %v", got, want)
	}
	var b bytes.Buffer
	res.Markdown(&b, "go test ./bench")
	if !strings.Contains(b.String(), "BenchmarkLockproxy/multiproxy/proxies=2/workers=8/keys=2-") {
		t.Errorf("report lacks the benchstat lines:\n%s", b.String())
	}
}
