package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// shutdownTimeout bounds the shutdown: clients answered, in-flight
// operations and their undos finished.
const shutdownTimeout = 5 * time.Second

// logStarted says what this process serves and on what.
func logStarted(logger *slog.Logger, cfg *fileConfig, lns *listeners, engine *quorum.Engine, tm tlsMaterial, configFile string) {
	logger.Info("lockproxy started",
		"version", version, "commit", commitID(),
		"listen", addrOf(lns.plain), "tls_listen", addrOf(lns.tls), "metrics", addrOf(lns.metrics),
		"masters", strings.Join(cfg.Quorum.Masters, ","), "n", engine.N(), "q", engine.Q(),
		"master_tls", tm.masterDial != nil, "master_auth", cfg.Quorum.MasterPassword != "", "requirepass", cfg.RequirePass != "",
		"node_timeout", engine.Config().NodeTimeout, "max_ttl", engine.Config().MaxTTL,
		"config", configFile)
}

// serve serves the client listeners until ctx ends or one fails, then
// shuts down: no new clients, in-flight operations (their undos included)
// finished, metrics stopped. It returns the exit status.
func serve(ctx context.Context, srv *proxy.Server, lns *listeners, clientTLS *tls.Config, metricsSrv *http.Server, logger *slog.Logger) int {
	errc := make(chan error, 2)
	serving := 0
	for _, ln := range []net.Listener{lns.plain, lns.tls} {
		if ln == nil {
			continue
		}
		if ln == lns.tls {
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
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
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
