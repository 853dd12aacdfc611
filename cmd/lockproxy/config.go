package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/pelletier/go-toml/v2"
)

// fileConfig is config.toml as written; every key is documented there.
type fileConfig struct {
	Listen        string   `toml:"listen"`
	TLSListen     string   `toml:"tls_listen"`
	TLSCertFile   string   `toml:"tls_cert_file"`
	TLSKeyFile    string   `toml:"tls_key_file"`
	TLSCAFile     string   `toml:"tls_ca_file"`
	MetricsListen *string  `toml:"metrics_listen"`
	RequirePass   string   `toml:"requirepass"`
	DefaultTTL    duration `toml:"default_ttl"`
	MaxClients    int      `toml:"max_clients"`
	// AllowForceAcquire: scripts marked force (rueidislock's force
	// acquisition) run; false refuses them. nil: the default, true.
	AllowForceAcquire *bool `toml:"allow_force_acquire"`
	// IdleTimeout and HandshakeTimeout: proxy.Config's; "0" or "" off.
	IdleTimeout      duration               `toml:"idle_timeout"`
	HandshakeTimeout duration               `toml:"handshake_timeout"`
	LogLevel         string                 `toml:"log_level"`
	LogFormat        string                 `toml:"log_format"`
	Quorum           quorumConfig           `toml:"quorum"`
	Scripts          []catalog.ScriptConfig `toml:"scripts"`
	PubSub           pubsubConfig           `toml:"pubsub"`

	// Client input limits: proxy.Config MaxBulkLen, MaxArgs, MaxQueryBuffer.
	ProtoMaxBulkLen        int `toml:"proto_max_bulk_len"`
	ProtoMaxArgs           int `toml:"proto_max_args"`
	ClientQueryBufferLimit int `toml:"client_query_buffer_limit"`
	// ClientQueryBufferTotal: proxy.Config MaxInputTotal, all connections.
	ClientQueryBufferTotal int64 `toml:"client_query_buffer_total"`

	src *source // where each value came from, for error messages
}

type quorumConfig struct {
	Masters          []string `toml:"masters"`
	NodeTimeout      duration `toml:"node_timeout"`
	MaxTTL           duration `toml:"max_ttl"`
	ClockDriftFactor *float64 `toml:"clock_drift_factor"`
	Quarantine       *bool    `toml:"quarantine"`
	Bootstrap        bool     `toml:"bootstrap"`
	QueueLimit       int      `toml:"queue_limit"`
	MasterUsername   string   `toml:"master_username"`
	MasterPassword   string   `toml:"master_password"`
	// MasterTLS, when present (even empty), connects to the masters with TLS.
	MasterTLS     *masterTLSConfig `toml:"master_tls"`
	ProbeInterval duration         `toml:"probe_interval"`
	// QuarantineCheck: quorum.Config QuarantineCheck.
	QuarantineCheck duration `toml:"quarantine_check"`
}

// pubsubConfig is the [pubsub] table: the hub (proxy/pubsub) and the
// subscribers' output limits.
type pubsubConfig struct {
	// Enabled: SUBSCRIBE, PUBLISH, BLPOP and keyspace notifications work;
	// false refuses them and opens no subscriber connection to the masters.
	Enabled *bool `toml:"enabled"`
	// NotifyKeyspaceEvents is the initial notify-keyspace-events (Redis
	// syntax) of the notifications this proxy synthesizes for lock keys.
	NotifyKeyspaceEvents string `toml:"notify_keyspace_events"`
	MaxChannels          int    `toml:"max_channels"`
	MaxPerConnection     int    `toml:"max_per_connection"`
	MaxSubscriptions     int    `toml:"max_subscriptions"`
	// MaxPatterns and MaxPatternsPerConnection bound the patterns every
	// PUBLISH is matched against (pubsub.Config.MaxPatterns).
	MaxPatterns              int `toml:"max_patterns"`
	MaxPatternsPerConnection int `toml:"max_patterns_per_connection"`
	// Output limits of a subscriber, in bytes and seconds (Redis's
	// client-output-buffer-limit pubsub 32mb 8mb 60).
	OutputBufferHard        int64 `toml:"output_buffer_hard"`
	OutputBufferSoft        int64 `toml:"output_buffer_soft"`
	OutputBufferSoftSeconds int   `toml:"output_buffer_soft_seconds"`
}

type masterTLSConfig struct {
	CAFile             string `toml:"ca_file"`
	CertFile           string `toml:"cert_file"`
	KeyFile            string `toml:"key_file"`
	ServerName         string `toml:"server_name"`
	InsecureSkipVerify bool   `toml:"insecure_skip_verify"`
}

// duration decodes "50ms"-style strings.
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return &durationError{text: string(b)}
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", b)
	}
	d.Duration = v
	return nil
}

func defaults() fileConfig {
	metrics := "127.0.0.1:9379"
	return fileConfig{
		Listen:        "127.0.0.1:7379",
		MetricsListen: &metrics,
		MaxClients:    10000,

		IdleTimeout:      duration{10 * time.Minute},
		HandshakeTimeout: duration{10 * time.Second},
		LogLevel:         "info",
		LogFormat:        "text",

		ProtoMaxBulkLen:        1 << 20,
		ProtoMaxArgs:           1 << 16,
		ClientQueryBufferLimit: 8 << 20,
		ClientQueryBufferTotal: 128 << 20,
		PubSub: pubsubConfig{
			MaxChannels: 10000, MaxPerConnection: 1000, MaxSubscriptions: 100000,
			MaxPatterns: 1000, MaxPatternsPerConnection: 100,
			OutputBufferHard: 32 << 20, OutputBufferSoft: 8 << 20, OutputBufferSoftSeconds: 60,
		},
		Quorum: quorumConfig{
			Masters:         []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"},
			NodeTimeout:     duration{50 * time.Millisecond},
			MaxTTL:          duration{60 * time.Second},
			ProbeInterval:   duration{time.Second},
			QuarantineCheck: duration{500 * time.Millisecond},
		},
	}
}

// Environment variables that override secrets, so that they need not sit
// in the file.
const (
	envRequirePass    = "LOCKPROXY_REQUIREPASS"
	envMasterPassword = "LOCKPROXY_MASTER_PASSWORD"
)

// loadConfig decodes path strictly ("" means the defaults), applies the
// flags given on the command line (config key → flag name and value) and
// the environment overrides, and checks the result. Errors name the file,
// the line and the key, or the flag, so that a person can fix them.
func loadConfig(path string, flags []flagOverride) (fileConfig, error) {
	cfg := defaults()
	cfg.src = &source{path: path, flags: map[string]string{}}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("reading config: %w", err)
		}
		cfg.src.data = data
		cfg.src.keys = scanKeys(data)
		dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return cfg, cfg.src.decodeError(err)
		}
	}
	for _, f := range flags {
		cfg.src.flags[f.key] = f.flag
		switch f.key {
		case "listen":
			cfg.Listen = f.value
		case "quorum.masters":
			cfg.Quorum.Masters = strings.Split(f.value, ",")
		case "metrics_listen":
			v := f.value
			if v == "off" {
				v = ""
			}
			cfg.MetricsListen = &v
		case "log_level":
			cfg.LogLevel = f.value
		case "log_format":
			cfg.LogFormat = f.value
		}
	}
	if p := os.Getenv(envRequirePass); p != "" {
		cfg.RequirePass = p
	}
	if p := os.Getenv(envMasterPassword); p != "" {
		cfg.Quorum.MasterPassword = p
	}
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// flagOverride is a command-line flag that replaces a config key.
type flagOverride struct{ key, flag, value string }

// check validates values the decoder cannot, naming where each came from.
func (c *fileConfig) check() error {
	at := c.src.at
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("%s: log_level %q is not one of debug, info, warn, error", at("log_level"), c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("%s: log_format %q is not text or json", at("log_format"), c.LogFormat)
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	switch {
	case c.Listen == "" && c.TLSListen == "":
		return fmt.Errorf("%s: listen is empty and tls_listen is not set: clients could not connect at all", at("listen"))
	case c.Listen != "":
		if err := checkAddr(c.Listen); err != nil {
			return fmt.Errorf("%s: listen %q %v", at("listen"), c.Listen, err)
		}
	}
	if c.TLSListen != "" {
		if err := checkAddr(c.TLSListen); err != nil {
			return fmt.Errorf("%s: tls_listen %q %v", at("tls_listen"), c.TLSListen, err)
		}
		if c.TLSCertFile == "" || c.TLSKeyFile == "" {
			return fmt.Errorf("%s: tls_listen needs tls_cert_file and tls_key_file (PEM certificate and key)", at("tls_listen"))
		}
	} else {
		for _, k := range []struct{ key, v string }{{"tls_cert_file", c.TLSCertFile}, {"tls_key_file", c.TLSKeyFile}, {"tls_ca_file", c.TLSCAFile}} {
			if k.v != "" {
				return fmt.Errorf("%s: %s is set but tls_listen is not: set tls_listen (e.g. \"127.0.0.1:7380\") to serve TLS", at(k.key), k.key)
			}
		}
	}
	if c.MetricsListen != nil && *c.MetricsListen != "" {
		if err := checkAddr(*c.MetricsListen); err != nil {
			return fmt.Errorf("%s: metrics_listen %q %v", at("metrics_listen"), *c.MetricsListen, err)
		}
	}
	q := &c.Quorum
	if n := len(q.Masters); n < 1 || n > quorum.MaxMasters {
		return fmt.Errorf("%s: quorum.masters has %d masters; lockproxy needs 1 to %d", at("quorum.masters"), n, quorum.MaxMasters)
	}
	seen := map[string]bool{}
	for _, m := range q.Masters {
		if err := checkAddr(m); err != nil {
			return fmt.Errorf("%s: quorum.masters: %q %v", at("quorum.masters"), m, err)
		}
		if seen[m] {
			return fmt.Errorf("%s: quorum.masters lists %q twice; each master votes once, so a duplicate would count one master's vote twice", at("quorum.masters"), m)
		}
		seen[m] = true
	}
	if q.MaxTTL.Duration == 0 {
		return fmt.Errorf("%s: quorum.max_ttl must be positive", at("quorum.max_ttl"))
	}
	nodeTimeout := q.NodeTimeout.Duration
	if nodeTimeout == 0 {
		nodeTimeout = 50 * time.Millisecond
	}
	if nodeTimeout >= q.MaxTTL.Duration {
		return fmt.Errorf("%s: quorum.node_timeout (%v) must be smaller than quorum.max_ttl (%v, at %s): a master op must end well within a lock's life",
			at("quorum.node_timeout"), nodeTimeout, q.MaxTTL.Duration, at("quorum.max_ttl"))
	}
	if c.DefaultTTL.Duration > q.MaxTTL.Duration {
		return fmt.Errorf("%s: default_ttl (%v) exceeds quorum.max_ttl (%v)", at("default_ttl"), c.DefaultTTL.Duration, q.MaxTTL.Duration)
	}
	if f := q.ClockDriftFactor; f != nil && (*f < 0 || *f >= 0.5) {
		return fmt.Errorf("%s: quorum.clock_drift_factor %v is outside [0, 0.5); the usual value is 0.01", at("quorum.clock_drift_factor"), *f)
	}
	drift := 0.01
	if f := q.ClockDriftFactor; f != nil {
		drift = *f
	}
	if d := c.DefaultTTL.Duration; d > 0 && quorum.Validity(d, 0, drift) <= 0 {
		return fmt.Errorf("%s: default_ttl (%v) leaves no validity after the clock drift allowance (2ms + TTL × quorum.clock_drift_factor %g): a lock taken with it could never be granted", at("default_ttl"), d, drift)
	}
	if d := q.QuarantineCheck.Duration; d < 10*time.Millisecond || d > 5*time.Second {
		return fmt.Errorf("%s: quorum.quarantine_check %v is outside [10ms, 5s]: it is how long a master that lost its keys without restarting (SWAPDB, REPLICAOF NO ONE) may still vote; the default is 500ms", at("quorum.quarantine_check"), d)
	}
	if q.QueueLimit < 0 {
		return fmt.Errorf("%s: quorum.queue_limit %d is negative", at("quorum.queue_limit"), q.QueueLimit)
	}
	if q.MasterUsername != "" && q.MasterPassword == "" {
		return fmt.Errorf("%s: quorum.master_username is set without a password: set quorum.master_password or %s", at("quorum.master_username"), envMasterPassword)
	}
	return nil
}

// checkLimits checks the limits on clients and their input.
func (c *fileConfig) checkLimits() error {
	at := c.src.at
	if c.MaxClients < 1 {
		return fmt.Errorf("%s: max_clients %d must be at least 1", at("max_clients"), c.MaxClients)
	}
	switch {
	case c.ProtoMaxBulkLen < 1:
		return fmt.Errorf("%s: proto_max_bulk_len %d must be at least 1 (bytes)", at("proto_max_bulk_len"), c.ProtoMaxBulkLen)
	case c.ProtoMaxArgs < 3:
		return fmt.Errorf("%s: proto_max_args %d must be at least 3 (SET key value …)", at("proto_max_args"), c.ProtoMaxArgs)
	case c.ClientQueryBufferLimit < 65 || c.ClientQueryBufferLimit-64 < c.ProtoMaxBulkLen: // not ProtoMaxBulkLen+64, which wraps near the int limit
		return fmt.Errorf("%s: client_query_buffer_limit %d must exceed proto_max_bulk_len (%d) by at least 64: a command holds its largest argument", at("client_query_buffer_limit"), c.ClientQueryBufferLimit, c.ProtoMaxBulkLen)
	case c.ClientQueryBufferTotal/4 < int64(c.ClientQueryBufferLimit): // not 4 × the limit, which wraps
		return fmt.Errorf("%s: client_query_buffer_total %d must be at least 4 × client_query_buffer_limit (%d): the longest command, with what is read ahead and the TLS reader's copy, must fit beside others", at("client_query_buffer_total"), c.ClientQueryBufferTotal, c.ClientQueryBufferLimit)
	}
	return c.PubSub.check(at)
}

// check checks the [pubsub] table.
func (p *pubsubConfig) check(at func(string) string) error {
	for _, v := range []struct {
		key string
		n   int64
	}{
		{"pubsub.max_channels", int64(p.MaxChannels)}, {"pubsub.max_per_connection", int64(p.MaxPerConnection)},
		{"pubsub.max_subscriptions", int64(p.MaxSubscriptions)}, {"pubsub.output_buffer_hard", p.OutputBufferHard},
		{"pubsub.max_patterns", int64(p.MaxPatterns)}, {"pubsub.max_patterns_per_connection", int64(p.MaxPatternsPerConnection)},
		{"pubsub.output_buffer_soft", p.OutputBufferSoft}, {"pubsub.output_buffer_soft_seconds", int64(p.OutputBufferSoftSeconds)},
	} {
		if v.n < 1 {
			return fmt.Errorf("%s: %s %d must be at least 1", at(v.key), v.key, v.n)
		}
	}
	if p.MaxPerConnection > p.MaxChannels {
		return fmt.Errorf("%s: pubsub.max_per_connection %d exceeds pubsub.max_channels %d: one connection could take every channel and lock every other subscriber out; keep it well below (the default is a tenth)", at("pubsub.max_per_connection"), p.MaxPerConnection, p.MaxChannels)
	}
	if p.MaxPatterns > p.MaxChannels {
		return fmt.Errorf("%s: pubsub.max_patterns %d exceeds pubsub.max_channels %d (patterns are among the channels)", at("pubsub.max_patterns"), p.MaxPatterns, p.MaxChannels)
	}
	if p.MaxPatternsPerConnection > p.MaxPatterns {
		return fmt.Errorf("%s: pubsub.max_patterns_per_connection %d exceeds pubsub.max_patterns %d: one connection could take every pattern; keep it well below (the default is a tenth)", at("pubsub.max_patterns_per_connection"), p.MaxPatternsPerConnection, p.MaxPatterns)
	}
	if p.OutputBufferSoft > p.OutputBufferHard {
		return fmt.Errorf("%s: pubsub.output_buffer_soft %d exceeds pubsub.output_buffer_hard %d", at("pubsub.output_buffer_soft"), p.OutputBufferSoft, p.OutputBufferHard)
	}
	if _, err := pubsub.ParseKeyspaceEvents(p.NotifyKeyspaceEvents); err != nil {
		return fmt.Errorf("%s: pubsub.notify_keyspace_events %q: %v", at("pubsub.notify_keyspace_events"), p.NotifyKeyspaceEvents, err)
	}
	return nil
}

// checkAddr accepts host:port with a numeric port (0 picks a free one).
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("is not host:port (%v)", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("has no valid port number (0-65535)")
	}
	return nil
}

// warnings are settings that work but that an operator should hear about.
func (c *fileConfig) warnings() []string {
	var w []string
	if c.RequirePass == "" {
		for _, a := range []string{c.Listen, c.TLSListen} {
			if host, _, err := net.SplitHostPort(a); err == nil && !isLoopback(host) {
				w = append(w, fmt.Sprintf("%s: clients on other hosts can reach %s without a password; set requirepass (or %s)", c.src.at("requirepass"), a, envRequirePass))
			}
		}
	}
	if n := len(c.Quorum.Masters); n > 1 && n%2 == 0 {
		w = append(w, fmt.Sprintf("%s: %d masters need a quorum of %d and tolerate as few failures as %d would; use an odd number", c.src.at("quorum.masters"), n, quorum.Size(n), n-1))
	}
	if t := c.Quorum.MasterTLS; t != nil && t.InsecureSkipVerify {
		w = append(w, fmt.Sprintf("%s: quorum.master_tls.insecure_skip_verify accepts any certificate: the masters are not authenticated", c.src.at("quorum.master_tls.insecure_skip_verify")))
	}
	return w
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
