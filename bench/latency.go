package bench

import (
	"math"
	"slices"
	"time"
)

// Latencies holds every recorded latency of a run, sorted ascending. Keeping
// all samples (a few hundred thousand per run) is cheap and gives exact
// quantiles and CDFs, like an HDR histogram without its rounding.
type Latencies []time.Duration

// mergeLatencies concatenates the workers' samples and sorts them.
func mergeLatencies(parts [][]time.Duration) Latencies {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	all := make([]time.Duration, 0, n)
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return Latencies(all)
}

// Quantile returns the smallest sample at or above fraction q of the samples
// (nearest rank), 0 when there are none.
func (l Latencies) Quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(l)))) - 1
	i = max(0, min(i, len(l)-1))
	return l[i]
}

// Quantiles are the latency figures every table shows.
type Quantiles struct {
	P50, P99, P999, Max time.Duration
}

// Summary returns the quantiles of l.
func (l Latencies) Summary() Quantiles {
	if len(l) == 0 {
		return Quantiles{}
	}
	return Quantiles{P50: l.Quantile(0.50), P99: l.Quantile(0.99), P999: l.Quantile(0.999), Max: l[len(l)-1]}
}

// cdfPoints samples the empirical CDF of l at most n+tail times: n evenly
// spaced fractions plus the extreme tail, which an even spacing would skip.
// It returns latencies in milliseconds and their cumulative fractions.
func (l Latencies) cdfPoints(n int) (ms, frac []float64) {
	if len(l) == 0 {
		return nil, nil
	}
	qs := make([]float64, 0, n+8)
	for i := 1; i <= n; i++ {
		qs = append(qs, float64(i)/float64(n))
	}
	qs = append(qs, 0.995, 0.999, 0.9995, 0.9999)
	slices.Sort(qs)
	qs = slices.Compact(qs)
	ms = append(ms, float64(l[0])/1e6)
	frac = append(frac, 1/float64(len(l)))
	for _, q := range qs {
		ms = append(ms, float64(l.Quantile(q))/1e6)
		frac = append(frac, q)
	}
	return ms, frac
}
