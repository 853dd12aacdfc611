package main

import (
	"fmt"
	"log/slog"
)

// Every client connection is a file descriptor, and so is every master
// connection, listener and metrics connection. With max_clients above what
// the process may open (ulimit -n, systemd's LimitNOFILE), clients past
// the limit were not refused with "max number of clients reached": accept
// failed (EMFILE) and logged a warning 200 times a second, their
// connections waited unanswered in the listen queue, and a master whose
// connection dropped could not be dialled again until clients left, so
// the lock service stopped for everyone. As Redis does at start, lockproxy
// lowers max_clients to what the limit leaves after its own descriptors,
// and says so.

// fdReserved is what lockproxy keeps for itself out of the process's
// descriptor limit: the connections of each master (the pipeline, the
// monitor's checks, the probe, the pub/sub hub, and a redial's overlap:
// 5 in use, 8 kept), the metrics listener's connections, and 32 for the
// rest (listeners, the event loop, log and profile files), as Redis keeps
// 32 besides its clients.
func fdReserved(masters int, metrics bool) int {
	n := 32 + 8*masters
	if metrics {
		n += metricsMaxConns
	}
	return n
}

// fitMaxClients returns the max_clients the descriptor limit nofile allows
// beside reserved ones (maxClients when it fits, or nofile is unknown: 0),
// and an error when it leaves none.
func fitMaxClients(maxClients int, nofile uint64, reserved int) (int, error) {
	if nofile == 0 || nofile >= uint64(maxClients+reserved) {
		return maxClients, nil
	}
	if nofile <= uint64(reserved) {
		return 0, fmt.Errorf("the process may open %d files (ulimit -n; LimitNOFILE in a systemd unit), and lockproxy needs %d for its masters, listeners and metrics before any client: raise the limit to at least %d", nofile, reserved, reserved+maxClients)
	}
	return int(nofile) - reserved, nil
}

// applyFDLimit lowers cfg.MaxClients to what the descriptor limit allows,
// with a warning that says how to get the configured value back.
func applyFDLimit(cfg *fileConfig, logger *slog.Logger) error {
	nofile := openFilesLimit()
	reserved := fdReserved(len(cfg.Quorum.Masters), cfg.MetricsListen != nil && *cfg.MetricsListen != "")
	n, err := fitMaxClients(cfg.MaxClients, nofile, reserved)
	if err != nil {
		return err
	}
	if n < cfg.MaxClients {
		logger.Warn("max_clients lowered to fit the process's file descriptor limit: past it, new clients could not be accepted nor masters dialled again. Raise the limit (ulimit -n; LimitNOFILE in a systemd unit) to at least max_clients + reserved, or set max_clients to this value",
			"max_clients", n, "configured", cfg.MaxClients, "open_files_limit", nofile, "reserved", reserved)
		cfg.MaxClients = n
	}
	return nil
}
