package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// patient gives masters a node_timeout of 1s: these tests check what is
// reported, not timing, and must not fail on a loaded test machine.
func patient(pc *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = time.Second }

// withMetrics wires a Metrics into the cluster as cmd/lockproxy does: the
// engine's hooks and dialer, and PING probes every 20ms.
func withMetrics(m **ops.Metrics) clusterOpt {
	return func(pc *proxy.Config, qc *quorum.Config) {
		*m = ops.NewMetrics(nil, qc.Masters)
		pc.Metrics = *m
		qc.OnBatch, qc.OnMasterState, qc.Dial = (*m).OnBatch, (*m).OnMasterState, (*m).Dial(nil)
		qc.OnReply, qc.OnMiss = (*m).OnReply, (*m).OnMiss
	}
}

func (c *cluster) scrape() string {
	var b strings.Builder
	c.srv.WritePrometheus(&b)
	return b.String()
}

// metric returns the value of one series in a scrape; -1 when absent.
func metric(scrape, series string) float64 {
	sc := bufio.NewScanner(strings.NewReader(scrape))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}

// info returns INFO section's fields; a masterN line is returned as its
// own map under "masterN.<field>".
func info(t *testing.T, cl *redis.Client, section string) map[string]string {
	t.Helper()
	text, err := cl.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		out[k] = v
		if strings.HasPrefix(k, "master") && strings.Contains(v, "=") {
			for _, kv := range strings.Split(v, ",") {
				fk, fv, _ := strings.Cut(kv, "=")
				out[k+"."+fk] = fv
			}
		}
	}
	return out
}

// TestMetricsAndInfoFollowASession runs a scripted sequence (acquisitions,
// contentions, a release, a killed master, a quarantined one) and checks
// that /metrics and INFO say exactly what happened.
func TestMetricsAndInfoFollowASession(t *testing.T) {
	var m *ops.Metrics
	c := startCluster(t, 3, withMetrics(&m), patient)
	t.Cleanup(m.StartProbes(ops.ProbeOptions{Interval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	ctx := context.Background()
	cl := c.client()
	addr := func(i int) string { return fmt.Sprintf("%q", c.masters[i].Addr) }

	for i := range 3 {
		if ok, err := cl.SetNX(ctx, fmt.Sprint("ops:", i), "t1", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
	}
	for i := range 2 {
		if ok, err := cl.SetNX(ctx, fmt.Sprint("ops:", i), "t2", 10*time.Second).Result(); err != nil || ok {
			t.Fatalf("contended acquire %d: %v %v", i, ok, err)
		}
	}
	if n, err := redis.NewScript(releaseScript).Run(ctx, cl, []string{"ops:0"}, "t1").Int(); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if _, err := cl.Do(ctx, "FLUSHALL").Result(); err == nil {
		t.Fatal("FLUSHALL must be refused")
	}

	s := c.scrape()
	for series, want := range map[string]float64{
		`lockproxy_requests_total{op="acquire",outcome="acquired"}`:        3,
		`lockproxy_requests_total{op="acquire",outcome="contended"}`:       2,
		`lockproxy_requests_total{op="acquire",outcome="noquorum"}`:        0,
		`lockproxy_requests_total{op="release",outcome="ok"}`:              1,
		`lockproxy_requests_total{op="other",outcome="error"}`:             1,
		`lockproxy_quorum_decision_seconds_count{op="acquire"}`:            5,
		`lockproxy_quorum_decision_seconds_bucket{op="acquire",le="+Inf"}`: 5,
		`lockproxy_script_catalog_total{result="hit"}`:                     1,
		`lockproxy_client_connections`:                                     1,
		`lockproxy_client_connections_total`:                               1,
		`lockproxy_quorum_available`:                                       1,
		`lockproxy_master_up{master=` + addr(0) + `}`:                      1,
		`lockproxy_master_state{master=` + addr(0) + `,state="up"}`:        1,
		`lockproxy_master_state{master=` + addr(0) + `,state="down"}`:      0,
	} {
		if got := metric(s, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for i := range 3 {
		if n := metric(s, `lockproxy_master_batch_size_count{master=`+addr(i)+`}`); n < 1 {
			t.Errorf("master %d: batch size histogram count %v, want at least 1", i, n)
		}
	}
	if !strings.Contains(s, "# TYPE lockproxy_quorum_decision_seconds histogram") && strings.Contains(s, "# TYPE") {
		t.Errorf("the decision histogram has no TYPE line while others do")
	}

	st := info(t, cl, "stats")
	for k, want := range map[string]string{
		"requests_acquire_acquired": "3", "requests_acquire_contended": "2", "requests_release_ok": "1",
		"requests_other_error": "1", "script_catalog_hits": "1", "total_connections_received": "1",
	} {
		if st[k] != want {
			t.Errorf("INFO stats %s = %q, want %q", k, st[k], want)
		}
	}
	// The probes measure every master's latency.
	waitFor(t, func() bool {
		q := info(t, cl, "quorum")
		return q["master0.latency_ms"] != "" && q["master1.latency_ms"] != "" && q["master2.latency_ms"] != ""
	}, "probe latencies in INFO quorum")
	if n := metric(c.scrape(), `lockproxy_master_latency_seconds_count{master=`+addr(0)+`}`); n < 1 {
		t.Errorf("master latency histogram count %v, want at least 1", n)
	}

	// A killed master: down in INFO and /metrics, with its error; the
	// quorum still decides.
	c.masters[0].Kill()
	waitFor(t, func() bool { return info(t, cl, "quorum")["master0.state"] == "down" }, "master0 down in INFO quorum")
	q := info(t, cl, "quorum")
	if q["master0.last_error"] == "" || q["masters_down"] != "1" || q["quorum_available"] != "1" {
		t.Errorf("INFO quorum after a kill: %v", q)
	}
	if ok, err := cl.SetNX(ctx, "ops:after-kill", "t", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("acquire with 2 of 3: %v %v", ok, err)
	}
	s = c.scrape()
	for series, want := range map[string]float64{
		`lockproxy_master_state{master=` + addr(0) + `,state="down"}`:             1,
		`lockproxy_master_up{master=` + addr(0) + `}`:                             0,
		`lockproxy_master_errors_total{master=` + addr(0) + `,type="disconnect"}`: 1,
		`lockproxy_master_state_changes_total{master=` + addr(0) + `}`:            2, // up at start, then down
		`lockproxy_requests_total{op="acquire",outcome="acquired"}`:               4,
		// The dead master's vote on that acquisition did not count.
		`lockproxy_master_missed_votes_total{master=` + addr(0) + `,reason="unavailable"}`: 1,
	} {
		if got := metric(s, series); got != want {
			t.Errorf("after the kill: %s = %v, want %v", series, got, want)
		}
	}

	// A quarantined master: its votes do not count, and both INFO and
	// /metrics say until when.
	until := time.Now().Add(time.Minute)
	c.engine.SetQuarantine(1, until)
	q = info(t, cl, "quorum")
	if q["master1.state"] != "quarantined" || q["master1.quarantined_until"] == "" || q["masters_quarantined"] != "1" || q["quorum_available"] != "0" {
		t.Errorf("INFO quorum with master1 quarantined: %v", q)
	}
	_, err := cl.SetNX(ctx, "ops:no-quorum", "t", 10*time.Second).Result()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("acquire with one counting master: want NOQUORUM, got %v", err)
	}
	s = c.scrape()
	for series, want := range map[string]float64{
		`lockproxy_master_state{master=` + addr(1) + `,state="quarantined"}`: 1,
		`lockproxy_master_quarantined_until_seconds{master=` + addr(1) + `}`: float64(until.UnixMilli()) / 1e3,
		`lockproxy_quorum_available`:                                         0,
		`lockproxy_requests_total{op="acquire",outcome="noquorum"}`:          1,
	} {
		if got := metric(s, series); got != want {
			t.Errorf("with a quarantine: %s = %v, want %v", series, got, want)
		}
	}
	if st := info(t, cl, "stats"); st["requests_acquire_noquorum"] != "1" {
		t.Errorf("INFO stats requests_acquire_noquorum = %q, want 1", st["requests_acquire_noquorum"])
	}
}

// TestInfoAnswersWithoutMasters: INFO quorum is answered from memory within
// a millisecond, also while a master is paused (a round trip to it would
// take node_timeout) and another is dead.
func TestInfoAnswersWithoutMasters(t *testing.T) {
	c := startCluster(t, 3)
	cl := c.client()
	ctx := context.Background()
	c.masters[0].Kill()
	if err := c.masters[1].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.masters[1].Resume() })
	// Timed against PING on the same connection, so that a loaded test
	// machine slows both alike. A round trip to the paused master would
	// never end (the client's read timeout would fail the call).
	median := func(cmd func() error) (min, med time.Duration) {
		var took []time.Duration
		for range 21 {
			start := time.Now()
			if err := cmd(); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		return took[0], took[len(took)/2]
	}
	minInfo, medInfo := median(func() error {
		text, err := cl.Info(ctx, "quorum").Result()
		if err == nil && !strings.Contains(text, "master1:addr=") {
			err = fmt.Errorf("INFO quorum without master1:\n%s", text)
		}
		return err
	})
	_, medPing := median(func() error { return cl.Ping(ctx).Err() })
	if minInfo > time.Millisecond || medInfo > medPing+time.Millisecond {
		t.Fatalf("INFO quorum took %v at best, %v median (PING %v); want within a millisecond: no master round trip", minInfo, medInfo, medPing)
	}
	// Every section, and the default, answer too.
	all, err := cl.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []string{"# Server", "# Clients", "# Stats", "# Quorum", "lockproxy_version:", "masters:3", "quorum:2", "config_file:"} {
		if !strings.Contains(all, sec) {
			t.Errorf("INFO lacks %q", sec)
		}
	}
}
