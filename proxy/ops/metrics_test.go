package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// BenchmarkMetricsOutcome is the per-request metric cost on the hot path:
// one outcome counted and one decision latency observed, from every core.
// The counters are pre-created so that it allocates nothing (figures
// before and after: docs/bench/README.md).
func BenchmarkMetricsOutcome(b *testing.B) {
	m := NewMetrics(nil, nil)
	r := quorum.Decided(quorum.Acquire, quorum.Granted, resp.ReplyOK, nil, time.Millisecond)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Outcome(r)
		}
	})
}

func TestMetricsOutcomeAllocatesNothing(t *testing.T) {
	m := NewMetrics(nil, nil)
	r := quorum.Decided(quorum.Extend, quorum.Granted, resp.Reply{Type: resp.Integer, Int: 1}, nil, time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { m.Outcome(r); m.Request("set", "error") }); n != 0 {
		t.Fatalf("outcome+request allocate %v times per call, want 0", n)
	}
}

func TestMetricsOutcomeClasses(t *testing.T) {
	m := NewMetrics(nil, nil)
	errReply := resp.Reply{Type: resp.Error, Str: []byte("ERR x")}
	nq := &quorum.NoQuorumError{Answered: 1, N: 3, Q: 2}
	for _, r := range []*quorum.Request{
		quorum.Decided(quorum.Acquire, quorum.Granted, resp.ReplyOK, nil, time.Millisecond),
		quorum.Decided(quorum.Acquire, quorum.Refused, resp.ReplyNil, nil, time.Millisecond),
		quorum.Decided(quorum.Acquire, quorum.NoQuorum, resp.Reply{}, nq, time.Millisecond),
		quorum.Decided(quorum.Extend, quorum.Granted, resp.Reply{Type: resp.Integer, Int: 1}, nil, time.Millisecond),
		quorum.Decided(quorum.Extend, quorum.NotHeld, resp.Reply{Type: resp.Integer}, nil, time.Millisecond),
		quorum.Decided(quorum.Release, quorum.Done, resp.Reply{Type: resp.Integer, Int: 1}, nil, time.Millisecond),
		quorum.Decided(quorum.Read, quorum.Failed, errReply, nil, time.Millisecond),
	} {
		m.Outcome(r)
	}
	m.Request("set", "error")
	m.Request("unsupported", "error")
	got := map[string]uint64{}
	m.counts(func(name string, v uint64) { got[name] = v })
	want := map[string]uint64{
		"requests_acquire_acquired": 1, "requests_acquire_contended": 1, "requests_acquire_noquorum": 1,
		"requests_acquire_error": 1, "requests_extend_extended": 1, "requests_extend_notheld": 1,
		"requests_release_ok": 1, "requests_read_error": 1, "requests_other_error": 1,
	}
	for k, v := range got {
		if v != want[k] {
			t.Errorf("%s = %d, want %d", k, v, want[k])
		}
	}
	var b strings.Builder
	m.writeDecision(&b)
	for _, line := range []string{
		`lockproxy_quorum_decision_seconds_count{op="acquire"} 3`,
		`lockproxy_quorum_decision_seconds_bucket{op="acquire",le="+Inf"} 3`,
		`lockproxy_quorum_decision_seconds_count{op="read"} 1`,
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("decision histogram lacks %q:\n%s", line, b.String())
		}
	}
}

func TestHistogramBucketsAndQuantile(t *testing.T) {
	h := newHistogram(`op="x"`, []float64{0.001, 0.01, 0.1})
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, time.Second} {
		h.observe(int64(d))
	}
	cum, sum := h.snapshot()
	if want := []uint64{2, 3, 4, 5}; !equal(cum, want) {
		t.Fatalf("cumulative buckets %v, want %v (le is inclusive)", cum, want)
	}
	if sum < 1.056 || sum > 1.057 {
		t.Fatalf("sum %v, want 1.0565", sum)
	}
	if q := h.quantile(0.5); q <= 0.001 || q > 0.01 {
		t.Fatalf("median %v, want in (1ms, 10ms]", q)
	}
	out := string(h.append(nil, "m"))
	for _, line := range []string{`m_bucket{op="x",le="0.001"} 2`, `m_bucket{op="x",le="+Inf"} 5`, `m_count{op="x"} 5`} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %q in\n%s", line, out)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
