package quorum

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
)

// Config configures an Engine. Zero values get the documented defaults.
type Config struct {
	// Masters are the host:port of the N independent masters, 1..9.
	Masters []string
	// NodeTimeout bounds each master's part of an operation; a master that
	// misses it counts as no vote. Default 50ms. Also bounded by the TTL.
	NodeTimeout time.Duration
	// MaxTTL is the largest TTL a client may ask for. Default 60s.
	MaxTTL time.Duration
	// DriftFactor is the clock drift allowance per unit of TTL. Default 0.01.
	DriftFactor float64
	// QueueLimit bounds each master's queue of unwritten commands; past it
	// the master counts as no vote at once. Default 65536.
	QueueLimit int
	// Scripts are loaded on every master connection (with lockproxy's own),
	// so that EVALSHA of a catalogued script never meets NOSCRIPT.
	Scripts []string
	// UnderstoodPerMaster bounds the scripts not in Scripts (understood
	// ones) kept loaded on one master; past it that master's scripts are
	// flushed (load.go). 0: MaxUnderstoodPerMaster; tests set it lower.
	UnderstoodPerMaster int
	// Dial connects to a master; default plain TCP. Set for TLS.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MasterUsername and MasterPassword authenticate every connection to
	// a master (the pipelines' and the monitor's): AUTH password for the
	// default user, AUTH username password for an ACL user. Empty
	// MasterPassword: none.
	MasterUsername, MasterPassword string
	// Logger receives master state changes; default text on stderr.
	Logger *slog.Logger
	// Quarantine turns the restart quarantine on (quarantine.go): a master
	// that lost its data does not vote until the longest max_ttl of any
	// proxy on the master set has passed, detected by a marker key on every
	// master. Default false for an Engine built in code; lockproxy's
	// config.toml turns it on (quarantine = true) unless every master
	// persists each write (appendfsync always). Either way every master's
	// maxmemory-policy is checked, and one that may evict keys does not
	// vote.
	Quarantine bool
	// Bootstrap, with Quarantine: when at start every master answers and
	// none carries a marker (a brand-new deployment), mark them all usable
	// at once instead of quarantining them for MaxTTL. Default false.
	Bootstrap bool
	// QuarantineCheck is how often each master's marker is checked (also
	// checked at once on every reconnection, and on a flush the master
	// pushes). Default 500ms. Lower: a SWAPDB, REPLICAOF NO ONE or DEBUG
	// on a master is noticed sooner (it votes until then); each check is
	// one EVALSHA.
	QuarantineCheck time.Duration
	// SplitRetryJitter: an acquisition that lost its vote although some
	// masters granted it (the vote split between concurrent attempts,
	// typically of several lockproxy processes) is undone and tried once
	// more after a random delay of up to this, when the validity budget
	// allows a second round (retry.go). Default 5ms; negative: never.
	SplitRetryJitter time.Duration
	// OnBatch and OnMasterState observe the pipelines, for metrics.
	OnBatch       func(master int, ops int)
	OnMasterState func(master int, up bool, err error)
	// OnReply is told each master reply's round trip (batching.Options).
	OnReply func(master int, rtt time.Duration)
	// OnMiss is told each master vote that did not count, and why. It runs
	// on the hot path with a request's lock held: it must only count.
	OnMiss func(master int, why Miss)
	// Loop drives the plain TCP master connections and, through the proxy,
	// plain TCP clients (see internal/evloop for why). nil: the Engine
	// starts its own on Linux, or, with NoEventLoop or elsewhere, uses a
	// goroutine per connection.
	Loop        *evloop.Loop
	NoEventLoop bool
}

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	if len(c.Masters) < 1 || len(c.Masters) > MaxMasters {
		return fmt.Errorf("quorum.masters: %d masters given, lockproxy needs 1 to %d", len(c.Masters), MaxMasters)
	}
	seen := map[string]bool{}
	for _, m := range c.Masters {
		if _, _, err := net.SplitHostPort(m); err != nil {
			return fmt.Errorf("quorum.masters: %q is not host:port: %v", m, err)
		}
		if seen[m] {
			return fmt.Errorf("quorum.masters: %q is listed twice; each master votes once", m)
		}
		seen[m] = true
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = 50 * time.Millisecond
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = 60 * time.Second
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = 0.01
	}
	if c.QueueLimit == 0 {
		c.QueueLimit = 65536
	}
	if c.SplitRetryJitter == 0 {
		c.SplitRetryJitter = 5 * time.Millisecond
	}
	if c.QuarantineCheck <= 0 {
		c.QuarantineCheck = 500 * time.Millisecond
	}
	switch {
	case c.NodeTimeout < 0:
		return fmt.Errorf("quorum.node_timeout: %v is negative", c.NodeTimeout)
	case c.MaxTTL < 0:
		return fmt.Errorf("quorum.max_ttl: %v is negative", c.MaxTTL)
	case c.NodeTimeout >= c.MaxTTL:
		return fmt.Errorf("quorum.node_timeout (%v) must be smaller than quorum.max_ttl (%v)", c.NodeTimeout, c.MaxTTL)
	case c.DriftFactor < 0 || c.DriftFactor >= 0.5:
		return fmt.Errorf("quorum.clock_drift_factor: %v is outside [0, 0.5)", c.DriftFactor)
	case c.QueueLimit < 0:
		return fmt.Errorf("quorum.queue_limit: %d is negative", c.QueueLimit)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return nil
}
