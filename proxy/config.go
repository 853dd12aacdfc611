package proxy

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// Config configures a Server. Zero values get the documented defaults.
type Config struct {
	// Engine decides every lock operation. Required.
	Engine *quorum.Engine
	// Catalog recognizes lock scripts (catalog.New). Required.
	Catalog *catalog.Catalog
	// RequirePass, when set, must be given with AUTH or HELLO … AUTH
	// before any other command.
	RequirePass string
	// DefaultTTL is the TTL of SETNX and SET NX without expiry; 0 refuses
	// them (a lock that never expires is never safe to take).
	DefaultTTL time.Duration
	// MaxClients bounds client connections; past it a new connection gets
	// an error and is closed. Default 10000.
	MaxClients int
	// WriteTimeout bounds writing replies to a client: a client that does
	// not read is disconnected rather than holding the proxy. Default 10s.
	WriteTimeout time.Duration
	// MaxBulkLen bounds one argument of a client command (key, token,
	// script body), in bytes. Default 1 MiB: lock commands carry short
	// keys and tokens, and the longest legitimate argument is a script
	// body of a few KiB (Redis allows 512 MiB: proto-max-bulk-len).
	MaxBulkLen int
	// MaxArgs bounds the arguments of one command, its name included.
	// Default 65536: far above any lock command (a DEL or EXISTS of many
	// keys), low enough that a forged count cannot make lockproxy allocate
	// or loop much (Redis: 1M, fixed).
	MaxArgs int
	// MaxQueryBuffer bounds one command as sent, framing included, in
	// bytes. A command is buffered until it is complete, so with
	// MaxClients this bounds the memory clients can make lockproxy hold.
	// Default 8 MiB (Redis: client-query-buffer-limit, 1 GiB).
	MaxQueryBuffer int
	// MaxInputTotal bounds the memory all connections together hold in
	// input buffers: unfinished commands and commands read ahead; past it
	// the connection holding the most
	// is closed with an error naming client_query_buffer_total. Default
	// 128 MiB; at least 4 × MaxQueryBuffer, so that the longest command
	// fits beside others.
	MaxInputTotal int64
	// LearnedScripts bounds the sha1s of reformatted catalogued scripts
	// that clients EVALed or loaded, which then answer EVALSHA: the least
	// recently used is dropped past it (its client gets NOSCRIPT and falls
	// back to EVAL). The catalog's own sha1s always stay. Default 10000.
	LearnedScripts int
	// DenyForce refuses catalogued scripts marked Force, which take a lock
	// whoever holds it (rueidislock's force acquisition): config
	// allow_force_acquire = false. Default false: allowed, as on one Redis.
	DenyForce bool
	// IdleTimeout closes a connection that has neither sent a byte nor
	// been sent a reply for this long, unless its pipeline waits for the
	// masters or its replies wait for it to read; 0: never (Redis's
	// timeout 0). config.toml's default is 10 minutes.
	IdleTimeout time.Duration
	// HandshakeTimeout closes a connection that has not, this long after
	// it was accepted, authenticated (when RequirePass is set) and sent a
	// complete command, however busy it is: silent or unauthenticated
	// connections cannot hold MaxClients for long. 0: never.
	// config.toml's default is 10s.
	HandshakeTimeout time.Duration
	// ConfigFile, Version and Commit are shown by INFO.
	ConfigFile string
	Version    string
	Commit     string
	// Loop runs the client connections; nil: the engine's, or, when the
	// engine has none, one of the Server's own.
	Loop *evloop.Loop
	// StreamClients serves plain TCP clients like TLS ones, through a
	// reader and a writer goroutine, instead of polling their sockets on
	// the loop (tests of that transport; platforms without epoll do so
	// anyway).
	StreamClients bool
	// Hub carries pub/sub and lockproxy's events between proxies
	// (proxy/pubsub): SUBSCRIBE and its kin, PUBLISH, BLPOP/BRPOP, keyspace
	// notifications. nil: those commands are refused.
	Hub *pubsub.Hub
	// PubSubHardLimit, PubSubSoftLimit and PubSubSoftFor bound what a
	// subscriber has not read: past the hard limit, or past the soft one
	// for PubSubSoftFor, it is disconnected (Redis's
	// client-output-buffer-limit pubsub 32mb 8mb 60, the defaults).
	PubSubHardLimit int64
	PubSubSoftLimit int64
	PubSubSoftFor   time.Duration
	// Metrics receives counters (ops.NewMetrics); nil: counted, not exposed.
	Metrics *ops.Metrics
	Logger  *slog.Logger
}

// defaultMaxInputTotal is Config.MaxInputTotal's default: 128 MiB, far
// above what lock clients hold (a few KiB each; 10000 idle connections
// hold 40 MiB of 4 KiB buffers), and a bound the process survives.
const defaultMaxInputTotal = 128 << 20

// check fills in the defaults of cfg and checks the rest.
func (cfg *Config) check() error {
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 10000
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.MaxBulkLen <= 0 {
		cfg.MaxBulkLen = 1 << 20
	}
	if cfg.MaxArgs <= 0 {
		cfg.MaxArgs = 1 << 16
	}
	if cfg.LearnedScripts <= 0 {
		cfg.LearnedScripts = catalog.DefaultLearnedScripts
	}
	if cfg.MaxQueryBuffer <= 0 {
		cfg.MaxQueryBuffer = 8 << 20
	}
	if cfg.MaxInputTotal <= 0 {
		cfg.MaxInputTotal = defaultMaxInputTotal
	}
	if cfg.PubSubHardLimit <= 0 {
		cfg.PubSubHardLimit = 32 << 20
	}
	if cfg.PubSubSoftLimit <= 0 {
		cfg.PubSubSoftLimit = 8 << 20
	}
	if cfg.PubSubSoftFor <= 0 {
		cfg.PubSubSoftFor = 60 * time.Second
	}
	if cfg.MaxInputTotal < 4*int64(cfg.MaxQueryBuffer) {
		return fmt.Errorf("client_query_buffer_total (%d) must be at least 4 × client_query_buffer_limit (%d): the longest command, with what is read ahead and the TLS reader's copy, must fit beside others", cfg.MaxInputTotal, cfg.MaxQueryBuffer)
	}
	if cfg.MaxQueryBuffer < cfg.MaxBulkLen+64 {
		return fmt.Errorf("client_query_buffer_limit (%d) must exceed proto_max_bulk_len (%d): one argument must fit in a command", cfg.MaxQueryBuffer, cfg.MaxBulkLen)
	}
	if cfg.IdleTimeout < 0 || cfg.HandshakeTimeout < 0 {
		return fmt.Errorf("idle_timeout (%v) and handshake_timeout (%v) must not be negative (0 turns them off)", cfg.IdleTimeout, cfg.HandshakeTimeout)
	}
	if cfg.DefaultTTL < 0 {
		return fmt.Errorf("default_ttl: %v is negative", cfg.DefaultTTL)
	}
	if cfg.DefaultTTL > cfg.Engine.Config().MaxTTL {
		return fmt.Errorf("default_ttl (%v) exceeds quorum.max_ttl (%v)", cfg.DefaultTTL, cfg.Engine.Config().MaxTTL)
	}
	drift := cfg.Engine.Config().DriftFactor
	if cfg.DefaultTTL > 0 && quorum.Validity(cfg.DefaultTTL, 0, drift) <= 0 {
		return fmt.Errorf("default_ttl (%v) leaves no validity after the clock drift allowance (2ms + TTL × quorum.clock_drift_factor %g): it must be at least %v", cfg.DefaultTTL, drift, minTTLFor(drift))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = ops.NewMetrics(nil, nil)
	}
	return nil
}
