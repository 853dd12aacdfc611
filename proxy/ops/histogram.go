package ops

import (
	"strconv"
	"sync/atomic"
)

// histogram is a Prometheus histogram (cumulative "le" buckets, _sum,
// _count) that observes without a lock: one atomic add on the bucket and
// one on the sum. VictoriaMetrics' PrometheusHistogram takes a mutex per
// observation, which the per-request path avoids. A scrape may see a sum
// that is one observation ahead of the buckets; _count is the sum of the
// buckets, so the buckets and _count always agree.
type histogram struct {
	labels string    // `op="acquire"`, without braces
	bounds []int64   // upper bounds in ns
	les    []string  // the bounds as label values, in seconds
	counts []counter // len(bounds)+1; the last counts values above every bound
	sumNs  atomic.Int64
}

// counter is padded to its own cache line, so that two cores counting in
// neighbouring buckets do not contend.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

func newHistogram(labels string, bounds []float64) *histogram {
	h := &histogram{labels: labels, counts: make([]counter, len(bounds)+1)}
	for _, b := range bounds {
		h.bounds = append(h.bounds, int64(b*1e9))
		h.les = append(h.les, strconv.FormatFloat(b, 'g', -1, 64))
	}
	return h
}

func (h *histogram) observe(ns int64) {
	if ns < 0 {
		ns = 0
	}
	i := 0
	for i < len(h.bounds) && ns > h.bounds[i] {
		i++
	}
	h.counts[i].n.Add(1)
	h.sumNs.Add(ns)
}

// snapshot returns the cumulative bucket counts (the last is +Inf, the
// total) and the sum in seconds.
func (h *histogram) snapshot() ([]uint64, float64) {
	cum := make([]uint64, len(h.counts))
	var total uint64
	for i := range h.counts {
		total += h.counts[i].n.Load()
		cum[i] = total
	}
	return cum, float64(h.sumNs.Load()) / 1e9
}

// append writes h in Prometheus text format under the family name.
func (h *histogram) append(b []byte, name string) []byte {
	cum, sum := h.snapshot()
	sep := ""
	if h.labels != "" {
		sep = ","
	}
	for i, c := range cum {
		le := "+Inf"
		if i < len(h.les) {
			le = h.les[i]
		}
		b = append(b, name+"_bucket{"+h.labels+sep+`le="`+le+`"} `...)
		b = strconv.AppendUint(b, c, 10)
		b = append(b, '\n')
	}
	b = append(b, name+"_sum{"+h.labels+"} "...)
	b = strconv.AppendFloat(b, sum, 'g', -1, 64)
	b = append(b, '\n')
	b = append(b, name+"_count{"+h.labels+"} "...)
	b = strconv.AppendUint(b, cum[len(cum)-1], 10)
	return append(b, '\n')
}

// quantile estimates the q-quantile (0..1) in seconds from the buckets, by
// linear interpolation as Prometheus' histogram_quantile does; 0 without
// observations. For INFO.
func (h *histogram) quantile(q float64) float64 {
	cum, _ := h.snapshot()
	total := cum[len(cum)-1]
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	for i, c := range cum {
		if float64(c) < rank {
			continue
		}
		if i == len(h.bounds) {
			return float64(h.bounds[len(h.bounds)-1]) / 1e9 // above the last bound
		}
		lo, prev := 0.0, 0.0
		if i > 0 {
			lo, prev = float64(h.bounds[i-1])/1e9, float64(cum[i-1])
		}
		hi := float64(h.bounds[i]) / 1e9
		if float64(c) == prev {
			return hi
		}
		return lo + (hi-lo)*(rank-prev)/(float64(c)-prev)
	}
	return 0
}
