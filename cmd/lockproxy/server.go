package main

import (
	"log/slog"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// serverConfig is the front end's part of the config as proxy.Config,
// wired to the engine, the hub (nil: pub/sub off), the catalog and the
// metrics.
func serverConfig(cfg *fileConfig, loop *evloop.Loop, engine *quorum.Engine, hub *pubsub.Hub, scripts *catalog.Catalog, pm *ops.Metrics, logger *slog.Logger, configFile string) proxy.Config {
	hard, soft, softFor := pubsubLimits(cfg.PubSub)
	return proxy.Config{
		Loop:            loop,
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
	}
}
