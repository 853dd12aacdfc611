// Command lockproxy is a Redis-protocol server that turns single-node lock
// commands into Redlock quorum decisions over N Redis masters.
//
//	lockproxy -config config.toml [-listen addr] [-masters a,b,c] [-metrics addr]
//	          [-log-level debug|info|warn|error] [-log-format text|json]
//	          [-cpuprofile file] [-version]
//
// Wiring only: decode the config, start the event loop, build the engine
// and the front end on it, serve, and shut down on SIGTERM/SIGINT (SIGHUP
// is not handled: there is no reload). Exit status: 0 after a clean
// shutdown, -version or -h, 1 when serving failed, 2 for a usage or
// configuration problem (including a listen address that cannot be bound).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// newLoop starts the event loop where there is one (Linux epoll);
// elsewhere nil: the engine uses a goroutine per master connection and the
// front end a loop of its own.
func newLoop(logger *slog.Logger) (*evloop.Loop, error) {
	if !evloop.Supported {
		return nil, nil
	}
	l, err := evloop.New(logger)
	if err != nil {
		return nil, fmt.Errorf("starting the event loop: %w", err)
	}
	return l, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program with its signals as ctx (cancelled: shut down)
// and its output as writers, so that tests run it in-process. It reads as
// its steps, in the order that makes a bad start fail early and a shutdown
// undo them in reverse (the defers): flags and config, TLS material,
// listeners, engine, hub, server, then serve until ctx ends.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	a, code, exit := parseArgs(argv, stdout, stderr)
	if exit {
		return code
	}
	cfg, err := loadConfig(a.configPath, a.overrides)
	if err != nil {
		return configFailed(stderr, a, err)
	}
	logger := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	for _, w := range cfg.warnings() {
		logger.Warn("config: " + w)
	}
	fail := failer(cfg.LogFormat, logger, stderr)
	if err := applyFDLimit(&cfg, logger); err != nil {
		return fail("%v", err)
	}
	if a.cpuProfile != "" {
		stopProfile, err := startCPUProfile(a.cpuProfile)
		if err != nil {
			return fail("-cpuprofile: %v", err)
		}
		defer func() {
			if err := stopProfile(); err != nil {
				logger.Error("-cpuprofile: the profile could not be written", "file", a.cpuProfile, "err", err)
			}
		}()
	}

	// TLS material and scripts first: a bad file fails the start before
	// anything runs.
	tm, err := loadTLS(&cfg)
	if err != nil {
		return fail("%v", err)
	}
	scripts, err := catalog.New(cfg.Scripts)
	if err != nil {
		return fail("config: %s: %v", cfg.src.at("scripts"), err)
	}

	// Listeners before the engine: an unusable address fails the start at
	// once, before any master is dialled.
	lns, err := openListeners(&cfg)
	defer lns.close()
	if err != nil {
		return fail("%v", err)
	}

	// One event loop for the client connections and the master
	// connections: the front end and the engine share it, and it stops
	// last, after both.
	loop, err := newLoop(logger)
	if err != nil {
		return fail("%v", err)
	}
	if loop != nil {
		defer loop.Close()
	}

	pm := newMetrics(cfg.Quorum.Masters)
	engine, err := quorum.New(engineConfig(&cfg, loop, scripts, tm.masterDial, pm, logger))
	if err != nil {
		return fail("config: %v", err)
	}
	defer engine.Close()
	if stopProbes := startProbes(&cfg, pm, tm.masterDial, logger); stopProbes != nil {
		defer stopProbes()
	}

	hub, err := newHub(&cfg, engine, tm.masterDial, logger)
	if err != nil {
		return fail("config: [pubsub]: %v", err)
	}
	if hub != nil {
		defer hub.Close() // after the clients: serve shuts the server down first
	}

	srv, err := proxy.New(serverConfig(&cfg, loop, engine, hub, scripts, pm, logger, a.configFile))
	if err != nil {
		return fail("config: %v", err)
	}
	var metricsSrv *http.Server
	if lns.metrics != nil {
		metricsSrv = serveMetrics(lns.metrics, srv, logger)
	}
	logStarted(logger, &cfg, lns, engine, tm, a.configFile)
	return serve(ctx, srv, lns, tm.clientTLS, metricsSrv, logger)
}
