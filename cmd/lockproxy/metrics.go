package main

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/ops"
)

// newMetrics creates lockproxy's metrics for these masters, with the
// build's version and commit as lockproxy_build_info.
func newMetrics(masters []string) *ops.Metrics {
	set := metrics.NewSet()
	metrics.ExposeMetadata(true) // # TYPE lines, so Prometheus knows the histograms
	set.NewGauge(fmt.Sprintf(`lockproxy_build_info{version=%q,commit=%q}`, version, commitID()), func() float64 { return 1 })
	return ops.NewMetrics(set, masters)
}

// serveMetrics serves /metrics on ln: lockproxy's metrics (sampled at
// scrape) and the Go process's.
func serveMetrics(ln net.Listener, srv *proxy.Server) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		srv.WritePrometheus(w)
		metrics.WriteProcessMetrics(w)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	return hs
}
