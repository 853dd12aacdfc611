package main

import (
	"net"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/proxy"
)

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
