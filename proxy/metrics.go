package proxy

import (
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/quorum"
)

// Metrics are the front end's Prometheus metrics, in a Set the caller
// exposes on /metrics.
type Metrics struct {
	set         *metrics.Set
	connections *metrics.Gauge
	connCount   func() float64
	decision    *metrics.Histogram
	hits, miss  *metrics.Counter

	mu       sync.Mutex // protects counters
	counters map[string]*metrics.Counter
}

// NewMetrics registers the front end's metrics in set (a new Set if nil).
func NewMetrics(set *metrics.Set) *Metrics {
	if set == nil {
		set = metrics.NewSet()
	}
	m := &Metrics{set: set, counters: map[string]*metrics.Counter{}}
	m.connections = set.NewGauge("lockproxy_client_connections", nil)
	m.decision = set.NewHistogram("lockproxy_quorum_decision_seconds")
	m.hits = set.NewCounter(`lockproxy_script_catalog_total{result="hit"}`)
	m.miss = set.NewCounter(`lockproxy_script_catalog_total{result="miss"}`)
	return m
}

// Set is the metrics set, for /metrics.
func (m *Metrics) Set() *metrics.Set { return m.set }

func (m *Metrics) request(cmd, outcome string) {
	name := `lockproxy_requests_total{command="` + cmd + `",outcome="` + outcome + `"}`
	m.mu.Lock()
	c := m.counters[name]
	if c == nil {
		c = m.set.GetOrCreateCounter(name)
		m.counters[name] = c
	}
	m.mu.Unlock()
	c.Inc()
}

func (m *Metrics) scriptHit()  { m.hits.Inc() }
func (m *Metrics) scriptMiss() { m.miss.Inc() }

// outcome counts a decided request by kind and result, and its decision
// latency.
func (m *Metrics) outcome(r *quorum.Request) {
	var res string
	switch {
	case r.Err != nil:
		res = "noquorum"
	case r.Reply.Type == batching.Error:
		res = "error"
	case r.Kind == quorum.Acquire:
		if r.Validity > 0 {
			res = "acquired"
		} else {
			res = "contended"
		}
	default:
		res = "ok"
	}
	m.request(r.Kind.String(), res)
	m.decision.Update(time.Duration(batching.Now() - r.T0).Seconds())
}

// snapshot returns the request counters for INFO stats, as
// requests_<command>_<outcome>.
func (m *Metrics) snapshot() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]uint64{}
	for name, c := range m.counters {
		// lockproxy_requests_total{command="x",outcome="y"}
		parts := strings.Split(name, `"`)
		if len(parts) >= 4 {
			out["requests_"+parts[1]+"_"+parts[3]] = c.Get()
		}
	}
	return out
}
