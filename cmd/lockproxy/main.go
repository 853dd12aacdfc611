// Command lockproxy is a Redis-protocol server that turns single-node lock
// commands into Redlock quorum decisions over N Redis masters.
//
//	lockproxy -config config.toml [-listen addr] [-masters a,b,c] [-metrics addr]
//
// Wiring only: decode the config, build the engine and the front end,
// serve, and shut down on SIGTERM/SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// version is set with -ldflags "-X main.version=…"; the commit comes from
// the build info.
var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (TOML); see config.toml")
	listen := fs.String("listen", "", "RESP listen address, overrides listen")
	masters := fs.String("masters", "", "comma-separated master host:port list, overrides quorum.masters")
	metricsAddr := fs.String("metrics", "", `metrics HTTP address, overrides metrics_listen ("off" disables)`)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("lockproxy", version, commit())
		return 0
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy: config:", err)
		return 2
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *masters != "" {
		cfg.Quorum.Masters = strings.Split(*masters, ",")
	}
	if *metricsAddr != "" {
		m := *metricsAddr
		if m == "off" {
			m = ""
		}
		cfg.MetricsListen = &m
	}
	if p := os.Getenv("LOCKPROXY_REQUIREPASS"); p != "" {
		cfg.RequirePass = p
	}
	logger := newLogger(cfg.LogLevel, cfg.LogFormat)

	catalog, err := proxy.NewCatalog(cfg.Scripts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy: config:", *configPath+":", err)
		return 2
	}
	set := metrics.NewSet()
	qm := newQuorumMetrics(set, cfg.Quorum.Masters)
	var bodies []string
	for _, sc := range catalog.Scripts() {
		if sc.Body != "" {
			bodies = append(bodies, sc.Body)
		}
	}
	qcfg := quorum.Config{
		Masters:       cfg.Quorum.Masters,
		NodeTimeout:   cfg.Quorum.NodeTimeout.Duration,
		MaxTTL:        cfg.Quorum.MaxTTL.Duration,
		QueueLimit:    cfg.Quorum.QueueLimit,
		Scripts:       bodies,
		Logger:        logger,
		OnBatch:       qm.batch,
		OnMasterState: qm.state,
	}
	if cfg.Quorum.ClockDriftFactor != nil {
		qcfg.DriftFactor = *cfg.Quorum.ClockDriftFactor
		if qcfg.DriftFactor == 0 {
			qcfg.DriftFactor = 1e-12 // explicit 0: only the fixed 2ms
		}
	}
	engine, err := quorum.New(qcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy: config:", err)
		return 2
	}
	defer engine.Close()
	qm.engine = engine

	srv, err := proxy.New(proxy.Config{
		Engine:      engine,
		Catalog:     catalog,
		RequirePass: cfg.RequirePass,
		DefaultTTL:  cfg.DefaultTTL.Duration,
		MaxClients:  cfg.MaxClients,
		ConfigFile:  *configPath,
		Version:     version,
		Metrics:     proxy.NewMetrics(set),
		Logger:      logger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy: config:", err)
		return 2
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockproxy: cannot listen on %s (listen in %s or -listen): %v\n", cfg.Listen, *configPath, err)
		return 1
	}
	var metricsSrv *http.Server
	if cfg.MetricsListen != nil && *cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", *cfg.MetricsListen)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lockproxy: cannot listen on %s for metrics (metrics_listen or -metrics; \"off\" disables): %v\n", *cfg.MetricsListen, err)
			return 1
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			qm.refresh()
			set.WritePrometheus(w)
			metrics.WriteProcessMetrics(w)
		})
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go metricsSrv.Serve(mln)
	}
	logger.Info("lockproxy started",
		"version", version, "listen", ln.Addr().String(), "masters", strings.Join(cfg.Quorum.Masters, ","),
		"n", engine.N(), "q", engine.Q(), "node_timeout", engine.Config().NodeTimeout, "max_ttl", engine.Config().MaxTTL,
		"metrics", deref(cfg.MetricsListen), "config", *configPath)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		logger.Info("shutting down: no new clients; finishing in-flight operations and their undos", "signal", s.String())
	case err := <-errc:
		if err != nil {
			logger.Error("serving failed", "err", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code := 0
	if err := srv.Shutdown(ctx); err != nil {
		logger.Error("shutdown incomplete", "err", err)
		code = 1
	}
	if metricsSrv != nil {
		metricsSrv.Shutdown(ctx)
	}
	if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
		logger.Warn("listener", "err", err)
	}
	logger.Info("lockproxy stopped")
	return code
}

func deref(s *string) string {
	if s == nil || *s == "" {
		return "off"
	}
	return *s
}

func newLogger(level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "(commit unknown)"
}
