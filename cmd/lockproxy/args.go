package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
)

// args are the command line, decoded.
type args struct {
	configPath string
	configFile string // configPath made absolute, for INFO and the start log
	cpuProfile string
	overrides  []flagOverride // flags that override config keys
	jsonLogs   bool           // -log-format json: config errors are logged as JSON too
}

// parseArgs decodes the flags. exit: run returns code at once (-version,
// -h, a usage error).
func parseArgs(argv []string, stdout, stderr io.Writer) (a args, code int, exit bool) {
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (TOML); see config.toml")
	fs.String("listen", "", "RESP listen address, overrides listen")
	fs.String("masters", "", "comma-separated master host:port list, overrides quorum.masters")
	fs.String("metrics", "", `metrics HTTP address, overrides metrics_listen ("off" disables)`)
	fs.String("log-level", "", "debug, info, warn or error; overrides log_level")
	logFormat := fs.String("log-format", "", "text or json; overrides log_format")
	showVersion := fs.Bool("version", false, "print the version and commit, and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof format) of the run to this file, until shutdown")
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return a, 0, true // -h: the usage was asked for, not a usage error
		}
		return a, 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lockproxy: unexpected argument %q (flags only; see -h)\n", fs.Arg(0))
		return a, 2, true
	}
	if *showVersion {
		fmt.Fprintf(stdout, "lockproxy %s commit %s %s\n", version, commitID(), runtimeVersion())
		return a, 0, true
	}
	keyOf := map[string]string{"listen": "listen", "masters": "quorum.masters", "metrics": "metrics_listen", "log-level": "log_level", "log-format": "log_format"}
	fs.Visit(func(f *flag.Flag) {
		if key, ok := keyOf[f.Name]; ok {
			a.overrides = append(a.overrides, flagOverride{key: key, flag: f.Name, value: f.Value.String()})
		}
	})
	a.configPath, a.configFile, a.cpuProfile = *configPath, *configPath, *cpuProfile
	a.jsonLogs = *logFormat == "json"
	if a.configFile != "" {
		if abs, err := filepath.Abs(a.configFile); err == nil {
			a.configFile = abs
		}
	}
	return a, 0, false
}

// configFailed reports a config that could not be loaded, one line per
// problem, and returns the exit status. No logger exists yet: the file's
// log_format is unknown, so only -log-format json asks for JSON.
func configFailed(stderr io.Writer, a args, err error) int {
	if a.jsonLogs {
		l := newLogger(stderr, "info", "json")
		for _, line := range strings.Split(err.Error(), "\n") {
			l.Error("config: " + line)
		}
		return 2
	}
	fmt.Fprintln(stderr, "lockproxy: config:", strings.ReplaceAll(err.Error(), "\n", "\nlockproxy: config: "))
	return 2
}

// failer returns how run reports a start that cannot go on: as a log
// record with JSON logs, else as a plain line; either way exit status 2.
func failer(logFormat string, logger *slog.Logger, stderr io.Writer) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		if logFormat == "json" {
			logger.Error(msg)
		} else {
			fmt.Fprintln(stderr, "lockproxy:", msg)
		}
		return 2
	}
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
