// Command lockproxy is a Redis-protocol server that turns single-node lock
// commands into Redlock quorum decisions over N Redis masters.
//
//	lockproxy -config config.toml [-listen addr] [-masters a,b,c] [-metrics addr]
//	          [-log-level debug|info|warn|error] [-log-format text|json]
//	          [-cpuprofile file] [-version]
//
// Wiring only: decode the config, build the engine and the front end,
// serve, and shut down on SIGTERM/SIGINT. Exit status: 0 after a clean
// shutdown, 1 when serving failed, 2 for a usage or configuration problem
// (including a listen address that cannot be bound).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/quorum"
)

// version and commit are set at build time (make build):
//
//	-ldflags "-X main.version=1.2.3 -X main.commit=abc1234"
//
// Without -X, the commit comes from the Go build info when the build
// recorded it (not with -buildvcs=false).
var (
	version = "0.1.0-dev"
	commit  = ""
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program with its signals as ctx (cancelled: shut down)
// and its output as writers, so that tests run it in-process.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (TOML); see config.toml")
	fs.String("listen", "", "RESP listen address, overrides listen")
	fs.String("masters", "", "comma-separated master host:port list, overrides quorum.masters")
	fs.String("metrics", "", `metrics HTTP address, overrides metrics_listen ("off" disables)`)
	fs.String("log-level", "", "debug, info, warn or error; overrides log_level")
	fs.String("log-format", "", "text or json; overrides log_format")
	showVersion := fs.Bool("version", false, "print the version and commit, and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof format) of the run to this file, until shutdown")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lockproxy: unexpected argument %q (flags only; see -h)\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "lockproxy %s commit %s %s\n", version, commitID(), runtimeVersion())
		return 0
	}
	var overrides []flagOverride
	keyOf := map[string]string{"listen": "listen", "masters": "quorum.masters", "metrics": "metrics_listen", "log-level": "log_level", "log-format": "log_format"}
	fs.Visit(func(f *flag.Flag) {
		if key, ok := keyOf[f.Name]; ok {
			overrides = append(overrides, flagOverride{key: key, flag: f.Name, value: f.Value.String()})
		}
	})
	cfg, err := loadConfig(*configPath, overrides)
	if err != nil {
		if f := fs.Lookup("log-format"); f.Value.String() == "json" {
			l := newLogger(stderr, "info", "json")
			for _, line := range strings.Split(err.Error(), "\n") {
				l.Error("config: " + line)
			}
			return 2
		}
		fmt.Fprintln(stderr, "lockproxy: config:", strings.ReplaceAll(err.Error(), "\n", "\nlockproxy: config: "))
		return 2
	}
	logger := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	for _, w := range cfg.warnings() {
		logger.Warn("config: " + w)
	}
	configFile := *configPath
	if configFile != "" {
		if abs, err := filepath.Abs(configFile); err == nil {
			configFile = abs
		}
	}
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		if cfg.LogFormat == "json" {
			logger.Error(msg)
		} else {
			fmt.Fprintln(stderr, "lockproxy:", msg)
		}
		return 2
	}

	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return fail("-cpuprofile: %v", err)
		}
		defer func() {
			if err := stopProfile(); err != nil {
				logger.Error("-cpuprofile: the profile could not be written", "file", *cpuProfile, "err", err)
			}
		}()
	}

	// TLS material first: a bad file fails the start before anything runs.
	var masterDial proxy.DialFunc
	if t := cfg.Quorum.MasterTLS; t != nil {
		masterDial, err = proxy.MasterTLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
			ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}.Dialer()
		if err != nil {
			return fail("config: %s: quorum.master_tls.%v", fileErrorAt(cfg.src, "quorum.master_tls.", err), err)
		}
	}
	var clientTLS *tls.Config
	if cfg.TLSListen != "" {
		clientTLS, err = proxy.ServerTLS{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile}.Config()
		if err != nil {
			return fail("config: %s: tls_%v", fileErrorAt(cfg.src, "tls_", err), err)
		}
	}
	scripts, err := catalog.New(cfg.Scripts)
	if err != nil {
		return fail("config: %s: %v", cfg.src.at("scripts"), err)
	}

	// Listeners before the engine: an unusable address fails the start at
	// once, before any master is dialled.
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	listen := func(key, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %s %q cannot be used: %v", cfg.src.at(key), key, addr, err)
		}
		listeners = append(listeners, ln)
		return ln, nil
	}
	var plainLn, tlsLn, metricsLn net.Listener
	if cfg.Listen != "" {
		if plainLn, err = listen("listen", cfg.Listen); err != nil {
			return fail("%v", err)
		}
	}
	if cfg.TLSListen != "" {
		if tlsLn, err = listen("tls_listen", cfg.TLSListen); err != nil {
			return fail("%v", err)
		}
	}
	if cfg.MetricsListen != nil && *cfg.MetricsListen != "" {
		if metricsLn, err = listen("metrics_listen", *cfg.MetricsListen); err != nil {
			return fail("%v", err)
		}
	}

	set := metrics.NewSet()
	metrics.ExposeMetadata(true) // # TYPE lines, so Prometheus knows the histograms
	set.NewGauge(fmt.Sprintf(`lockproxy_build_info{version=%q,commit=%q}`, version, commitID()), func() float64 { return 1 })
	pm := ops.NewMetrics(set, cfg.Quorum.Masters)
	var bodies []string
	for _, sc := range scripts.Scripts() {
		if sc.Body != "" {
			bodies = append(bodies, sc.Body)
		}
	}
	qcfg := quorum.Config{
		Masters:        cfg.Quorum.Masters,
		NodeTimeout:    cfg.Quorum.NodeTimeout.Duration,
		MaxTTL:         cfg.Quorum.MaxTTL.Duration,
		QueueLimit:     cfg.Quorum.QueueLimit,
		Scripts:        bodies,
		Dial:           pm.Dial(masterDial),
		MasterUsername: cfg.Quorum.MasterUsername,
		MasterPassword: cfg.Quorum.MasterPassword,
		Logger:         logger,
		OnBatch:        pm.OnBatch,
		OnReply:        pm.OnReply,
		OnMiss:         pm.OnMiss,
		OnMasterState:  pm.OnMasterState,

		Quarantine: cfg.Quorum.Quarantine == nil || *cfg.Quorum.Quarantine,
		Bootstrap:  cfg.Quorum.Bootstrap,
	}
	if cfg.Quorum.ClockDriftFactor != nil {
		qcfg.DriftFactor = *cfg.Quorum.ClockDriftFactor
		if qcfg.DriftFactor == 0 {
			qcfg.DriftFactor = 1e-12 // explicit 0: only the fixed 2ms
		}
	}
	engine, err := quorum.New(qcfg)
	if err != nil {
		return fail("config: %v", err)
	}
	defer engine.Close()
	if iv := cfg.Quorum.ProbeInterval.Duration; iv > 0 {
		stopProbes := pm.StartProbes(ops.ProbeOptions{Interval: iv, Dial: masterDial,
			Username: cfg.Quorum.MasterUsername, Password: cfg.Quorum.MasterPassword, Logger: logger})
		defer stopProbes()
	}

	hub, err := newHub(&cfg, engine, masterDial, logger)
	if err != nil {
		return fail("config: [pubsub]: %v", err)
	}
	if hub != nil {
		defer hub.Close() // after the clients: srv.Shutdown below
	}
	hard, soft, softFor := pubsubLimits(cfg.PubSub)
	srv, err := proxy.New(proxy.Config{
		Hub:             hub,
		PubSubHardLimit: hard,
		PubSubSoftLimit: soft,
		PubSubSoftFor:   softFor,
		Engine:          engine,
		Catalog:         scripts,
		RequirePass:     cfg.RequirePass,
		DefaultTTL:      cfg.DefaultTTL.Duration,
		MaxClients:      cfg.MaxClients,
		DenyForce:       cfg.AllowForceAcquire != nil && !*cfg.AllowForceAcquire,
		ConfigFile:      configFile,
		Version:         version,
		Commit:          commitID(),
		Metrics:         pm,
		Logger:          logger,

		MaxBulkLen:     cfg.ProtoMaxBulkLen,
		MaxArgs:        cfg.ProtoMaxArgs,
		MaxQueryBuffer: cfg.ClientQueryBufferLimit,
		MaxInputTotal:  cfg.ClientQueryBufferTotal,

		IdleTimeout:      cfg.IdleTimeout.Duration,
		HandshakeTimeout: cfg.HandshakeTimeout.Duration,
	})
	if err != nil {
		return fail("config: %v", err)
	}
	var metricsSrv *http.Server
	if metricsLn != nil {
		metricsSrv = serveMetrics(metricsLn, srv)
	}
	logger.Info("lockproxy started",
		"version", version, "commit", commitID(),
		"listen", addrOf(plainLn), "tls_listen", addrOf(tlsLn), "metrics", addrOf(metricsLn),
		"masters", strings.Join(cfg.Quorum.Masters, ","), "n", engine.N(), "q", engine.Q(),
		"master_tls", masterDial != nil, "master_auth", cfg.Quorum.MasterPassword != "", "requirepass", cfg.RequirePass != "",
		"node_timeout", engine.Config().NodeTimeout, "max_ttl", engine.Config().MaxTTL,
		"config", configFile)

	errc := make(chan error, 2)
	serving := 0
	for _, ln := range []net.Listener{plainLn, tlsLn} {
		if ln == nil {
			continue
		}
		if ln == tlsLn {
			ln = tls.NewListener(ln, clientTLS)
		}
		serving++
		go func() { errc <- srv.Serve(ln) }()
	}
	code := 0
	select {
	case <-ctx.Done():
		logger.Info("shutting down: no new clients; finishing in-flight operations and their undos")
	case err := <-errc:
		serving--
		if err != nil {
			logger.Error("serving failed", "err", err)
			code = 1
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		var de *proxy.DrainError
		if errors.As(err, &de) {
			// Every client was answered; only masters that cannot answer
			// are left. Not a failed shutdown.
			logger.Warn("shutdown: some masters did not confirm the last commands", "err", err)
		} else {
			logger.Error("shutdown incomplete", "err", err)
			code = 1
		}
	}
	if metricsSrv != nil {
		metricsSrv.Shutdown(sctx)
	}
	for ; serving > 0; serving-- {
		if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
			logger.Warn("listener", "err", err)
		}
	}
	logger.Info("lockproxy stopped")
	return code
}

// fileErrorAt names the line of the option a proxy.FileError is about.
func fileErrorAt(src *source, prefix string, err error) string {
	var fe *proxy.FileError
	if errors.As(err, &fe) {
		return src.at(prefix + fe.Field)
	}
	return src.at(strings.TrimSuffix(prefix, "."))
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// commitID is the commit set at build time, else the one in the build
// info, else "unknown".
func commitID() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func runtimeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return ""
}
