package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/pelletier/go-toml/v2"
)

// fileConfig is config.toml as written; every key is documented there.
type fileConfig struct {
	Listen        string               `toml:"listen"`
	MetricsListen *string              `toml:"metrics_listen"`
	RequirePass   string               `toml:"requirepass"`
	DefaultTTL    duration             `toml:"default_ttl"`
	MaxClients    int                  `toml:"max_clients"`
	LogLevel      string               `toml:"log_level"`
	LogFormat     string               `toml:"log_format"`
	Quorum        quorumConfig         `toml:"quorum"`
	Scripts       []proxy.ScriptConfig `toml:"scripts"`
}

type quorumConfig struct {
	Masters          []string `toml:"masters"`
	NodeTimeout      duration `toml:"node_timeout"`
	MaxTTL           duration `toml:"max_ttl"`
	ClockDriftFactor *float64 `toml:"clock_drift_factor"`
	Quarantine       *bool    `toml:"quarantine"`
	Bootstrap        bool     `toml:"bootstrap"`
	QueueLimit       int      `toml:"queue_limit"`
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
		return fmt.Errorf("%q is not a duration (examples: \"50ms\", \"1.5s\", \"60s\")", b)
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
		LogLevel:      "info",
		LogFormat:     "text",
		Quorum: quorumConfig{
			Masters:     []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"},
			NodeTimeout: duration{50 * time.Millisecond},
			MaxTTL:      duration{60 * time.Second},
		},
	}
}

// loadConfig decodes path strictly. Errors name the file, the line and the
// key, so that a person can fix them.
func loadConfig(path string) (fileConfig, error) {
	cfg := defaults()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		var de *toml.DecodeError
		var sm *toml.StrictMissingError
		switch {
		case errors.As(err, &sm):
			var msgs []string
			for _, e := range sm.Errors {
				row, _ := e.Position()
				msgs = append(msgs, fmt.Sprintf("%s:%d: unknown key %q (see config.toml in the repository for the keys lockproxy reads)", path, row, strings.Join(e.Key(), ".")))
			}
			return cfg, errors.New(strings.Join(msgs, "\n"))
		case errors.As(err, &de):
			row, col := de.Position()
			key := strings.Join(de.Key(), ".")
			if key != "" {
				key = " (key " + key + ")"
			}
			return cfg, fmt.Errorf("%s:%d:%d%s: %s", path, row, col, key, de.Error())
		}
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.check(path, data); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// check validates values the decoder cannot, naming the line of the key.
func (c *fileConfig) check(path string, data []byte) error {
	at := func(key string) string { return fmt.Sprintf("%s:%d", path, lineOf(data, key)) }
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
	if c.MaxClients < 1 {
		return fmt.Errorf("%s: max_clients %d must be at least 1", at("max_clients"), c.MaxClients)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%s: listen %q is not host:port: %v", at("listen"), c.Listen, err)
	}
	if c.MetricsListen != nil && *c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(*c.MetricsListen); err != nil {
			return fmt.Errorf("%s: metrics_listen %q is not host:port: %v", at("metrics_listen"), *c.MetricsListen, err)
		}
	}
	if n := len(c.Quorum.Masters); n < 1 || n > 9 {
		return fmt.Errorf("%s: quorum.masters has %d masters; lockproxy needs 1 to 9", at("masters"), n)
	}
	if c.Quorum.QueueLimit < 0 {
		return fmt.Errorf("%s: quorum.queue_limit %d is negative", at("queue_limit"), c.Quorum.QueueLimit)
	}
	return nil
}

// lineOf finds the first line that assigns key, for error messages; 0 when
// the key is not in the file (a default or a flag).
func lineOf(data []byte, key string) int {
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, key) && strings.HasPrefix(strings.TrimSpace(t[len(key):]), "=") {
			return i + 1
		}
	}
	return 0
}
