package main

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/quorum"
)

// quorumMetrics exposes the engine's per-master observations.
type quorumMetrics struct {
	engine  *quorum.Engine
	batch_  []*metrics.Histogram
	up      []*metrics.Gauge
	queued  []*metrics.Gauge
	changes []*metrics.Counter
}

func newQuorumMetrics(set *metrics.Set, masters []string) *quorumMetrics {
	m := &quorumMetrics{}
	for _, addr := range masters {
		l := fmt.Sprintf(`{master=%q}`, addr)
		m.batch_ = append(m.batch_, set.NewHistogram("lockproxy_master_batch_size"+l))
		m.up = append(m.up, set.NewGauge("lockproxy_master_up"+l, nil))
		m.queued = append(m.queued, set.NewGauge("lockproxy_master_queue_depth"+l, nil))
		m.changes = append(m.changes, set.NewCounter("lockproxy_master_state_changes_total"+l))
	}
	return m
}

func (m *quorumMetrics) batch(i, ops int) { m.batch_[i].Update(float64(ops)) }

func (m *quorumMetrics) state(i int, up bool, err error) {
	v := 0.0
	if up {
		v = 1
	}
	m.up[i].Set(v)
	m.changes[i].Inc()
}

// refresh samples queue depths before a scrape.
func (m *quorumMetrics) refresh() {
	if m.engine == nil {
		return
	}
	for i, s := range m.engine.Masters() {
		m.queued[i].Set(float64(s.Queued + s.Inflight))
	}
}
