package main

import (
	"log/slog"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// newHub starts the pub/sub hub ([pubsub] in config.toml): one subscriber
// connection per master, dialled and authenticated as the engine's, and
// lockproxy's events published through the engine's pipelines. nil when
// pub/sub is switched off.
func newHub(cfg *fileConfig, engine *quorum.Engine, dial proxy.DialFunc, logger *slog.Logger) (*pubsub.Hub, error) {
	p := cfg.PubSub
	if p.Enabled != nil && !*p.Enabled {
		return nil, nil
	}
	hc := pubsub.Config{
		Masters:          cfg.Quorum.Masters,
		Username:         cfg.Quorum.MasterUsername,
		Password:         cfg.Quorum.MasterPassword,
		Publisher:        engine,
		Logger:           logger,
		DriftFactor:      engine.Config().DriftFactor,
		Quorum:           engine.Q(),
		HoldBack:         engine.Config().NodeTimeout,
		KeyspaceEvents:   p.NotifyKeyspaceEvents,
		MaxChannels:      p.MaxChannels,
		MaxPerSubscriber: p.MaxPerConnection,
		MaxSubscriptions: p.MaxSubscriptions,

		MaxPatterns:              p.MaxPatterns,
		MaxPatternsPerSubscriber: p.MaxPatternsPerConnection,
	}
	if dial != nil {
		hc.Dial = pubsub.DialFunc(dial)
	}
	return pubsub.New(hc)
}

// pubsubLimits are the subscribers' output limits for proxy.Config.
func pubsubLimits(p pubsubConfig) (hard, soft int64, softFor time.Duration) {
	return p.OutputBufferHard, p.OutputBufferSoft, time.Duration(p.OutputBufferSoftSeconds) * time.Second
}
