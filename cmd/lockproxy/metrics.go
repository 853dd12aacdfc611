package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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

// The metrics listener's bounds. Every connection to it is a file
// descriptor and a goroutine of the process that serves the locks: with
// no idle timeout a keep-alive connection that made one request was held
// until its peer closed it, so anyone who can reach the listener could
// open connections until the process ran out of descriptors, and then no
// client could connect and no master connection could be dialled again.
// A scraper uses one connection per target; the bound leaves room for a
// few of them and a person with curl.
var (
	metricsMaxConns          = 32
	metricsReadHeaderTimeout = 5 * time.Second
	metricsReadTimeout       = 10 * time.Second
	metricsWriteTimeout      = 30 * time.Second
	metricsIdleTimeout       = 2 * time.Minute
)

// serveMetrics serves /metrics on ln: lockproxy's metrics (sampled at
// scrape) and the Go process's.
func serveMetrics(ln net.Listener, srv *proxy.Server, logger *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		srv.WritePrometheus(w)
		metrics.WriteProcessMetrics(w)
	})
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: metricsReadHeaderTimeout,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       metricsIdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go hs.Serve(&limitListener{Listener: ln, max: int64(metricsMaxConns), logger: logger})
	return hs
}

// limitListener keeps at most max connections of its listener open. One
// over it is answered 503, saying why, and closed at once: a scraper sees
// the reason in its target's error, where a connection left waiting in the
// accept queue would only time out.
type limitListener struct {
	net.Listener
	max    int64
	open   atomic.Int64
	logger *slog.Logger

	mu       sync.Mutex
	loggedAt time.Time
	unlogged int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refuse(c)
	}
}

// refuse answers a connection over the bound and closes it; a warning
// names the bound, at most one every 10s with how many more were refused.
func (l *limitListener) refuse(c net.Conn) {
	msg := "lockproxy serves at most " + strconv.FormatInt(l.max, 10) + " metrics connections at once (fixed); this one is closed: close idle ones, or scrape from fewer places\n"
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
	c.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.loggedAt) >= 10*time.Second {
		l.logger.Warn("metrics connection refused: the metrics listener has its maximum of open connections; look for a scraper that opens connections without closing them",
			"client", c.RemoteAddr().String(), "max_connections", l.max, "others_refused_since_last_warning", l.unlogged)
		l.loggedAt, l.unlogged = now, 0
	} else {
		l.unlogged++
	}
}

// limitedConn gives its place back once closed (the server closes each
// connection once; Close is made idempotent all the same).
type limitedConn struct {
	net.Conn
	l      *limitListener
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}
