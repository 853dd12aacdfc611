package main

import (
	"log/slog"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/quorum"
)

// engineConfig is the [quorum] section as quorum.Config: the masters,
// their credentials and dialer (counted by the metrics), the catalog's
// scripts to load on every master connection, and the metrics' hooks.
func engineConfig(cfg *fileConfig, loop *evloop.Loop, scripts *catalog.Catalog, dial proxy.DialFunc, pm *ops.Metrics, logger *slog.Logger) quorum.Config {
	bodies := scripts.MasterScripts()
	q := cfg.Quorum
	qcfg := quorum.Config{
		Masters:        q.Masters,
		Loop:           loop,
		NodeTimeout:    q.NodeTimeout.Duration,
		MaxTTL:         q.MaxTTL.Duration,
		QueueLimit:     q.QueueLimit,
		Scripts:        bodies,
		Dial:           pm.Dial(dial),
		MasterUsername: q.MasterUsername,
		MasterPassword: q.MasterPassword,
		Logger:         logger,
		OnBatch:        pm.OnBatch,
		OnReply:        pm.OnReply,
		OnMiss:         pm.OnMiss,
		OnMasterState:  pm.OnMasterState,

		Quarantine:      q.Quarantine == nil || *q.Quarantine,
		Bootstrap:       q.Bootstrap,
		QuarantineCheck: q.QuarantineCheck.Duration,
	}
	if q.ClockDriftFactor != nil {
		qcfg.DriftFactor = *q.ClockDriftFactor
		if qcfg.DriftFactor == 0 {
			qcfg.DriftFactor = 1e-12 // explicit 0: only the fixed 2ms
		}
	}
	return qcfg
}

// startProbes starts the masters' PING probes (quorum.probe_interval),
// dialled and authenticated as the engine's connections; nil when they are
// off.
func startProbes(cfg *fileConfig, pm *ops.Metrics, dial proxy.DialFunc, logger *slog.Logger) (stop func()) {
	iv := cfg.Quorum.ProbeInterval.Duration
	if iv <= 0 {
		return nil
	}
	return pm.StartProbes(ops.ProbeOptions{Interval: iv, Dial: dial,
		Username: cfg.Quorum.MasterUsername, Password: cfg.Quorum.MasterPassword, Logger: logger})
}
