package proxy

import (
	"fmt"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// cmdInfo: INFO [section…]. Describes lockproxy, never a master; answered
// from memory, without a round trip.
func cmdInfo(s *Server, c *client, args [][]byte) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	for _, sec := range []struct {
		name string
		fn   func(*strings.Builder)
	}{
		{"server", s.infoServer},
		{"clients", s.infoClients},
		{"persistence", infoPersistence},
		{"stats", s.infoStats},
		{"replication", infoReplication},
		{"keyspace", infoKeyspace},
		{"quorum", s.infoQuorum},
	} {
		if !all && !want[sec.name] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(sec.name[:1]) + sec.name[1:] + "\r\n")
		sec.fn(&b)
	}
	text := b.String()
	resp3 := c.resp3
	c.local(func(out []byte) []byte { return appendVerbatim(out, text, resp3) })
}

func field(b *strings.Builder, k string, v any) { fmt.Fprintf(b, "%s:%v\r\n", k, v) }

func (s *Server) infoServer(b *strings.Builder) {
	field(b, "redis_version", redisCompatVersion)
	field(b, "lockproxy_version", s.cfg.Version)
	field(b, "lockproxy_commit", s.cfg.Commit)
	field(b, "redis_mode", "standalone")
	field(b, "os", runtime.GOOS+" "+runtime.GOARCH)
	field(b, "arch_bits", strconv.IntSize)
	field(b, "process_id", os.Getpid())
	field(b, "go_version", runtime.Version())
	up := time.Since(s.start)
	field(b, "uptime_in_seconds", int64(up.Seconds()))
	field(b, "uptime_in_days", int64(up.Hours()/24))
	field(b, "config_file", s.cfg.ConfigFile)
	field(b, "masters", s.cfg.Engine.N())
	field(b, "quorum", s.cfg.Engine.Q())
}

func (s *Server) infoClients(b *strings.Builder) {
	field(b, "connected_clients", s.clients.Load())
	field(b, "maxclients", s.cfg.MaxClients)
	field(b, "blocked_clients", 0)
	field(b, "requirepass", map[bool]string{false: "no", true: "yes"}[s.cfg.RequirePass != ""])
	field(b, "client_input_bytes", s.budget.Used())
	field(b, "client_query_buffer_total", s.budget.Limit())
}

// infoPersistence answers what client ready checks look for.
func infoPersistence(b *strings.Builder) {
	field(b, "loading", 0)
	field(b, "async_loading", 0)
}

func infoReplication(b *strings.Builder) {
	field(b, "role", "master")
	field(b, "connected_slaves", 0)
}

// infoKeyspace is empty: lockproxy keeps no keys of its own, and counting
// the masters' would take a round trip.
func infoKeyspace(b *strings.Builder) {}

// infoStats has the counters of /metrics, under INFO-style names.
func (s *Server) infoStats(b *strings.Builder) {
	m := s.cfg.Metrics
	field(b, "total_connections_received", s.accepted.Load())
	field(b, "rejected_connections", s.rejected.Load())
	field(b, "protocol_errors", s.ProtocolErrors())
	field(b, "evicted_clients", s.budget.Evicted())
	field(b, "idle_timeout_closes", s.idleClosed.Load())
	field(b, "handshake_timeout_closes", s.handshakeClosed.Load())
	field(b, "auth_failures", m.authFailures.Get())
	var total uint64
	m.counts(func(name string, v uint64) {
		field(b, name, v)
		total += v
	})
	field(b, "total_lock_requests", total)
	for o, h := range m.decision {
		if h != nil {
			field(b, "decision_"+opNames[o]+"_p50_ms", fmtMs(h.quantile(0.5)))
			field(b, "decision_"+opNames[o]+"_p99_ms", fmtMs(h.quantile(0.99)))
		}
	}
	field(b, "script_catalog_hits", m.hits.Get())
	field(b, "script_catalog_misses", m.miss.Get())
	sent, lost, unknown := s.cfg.Engine.UndoStats()
	field(b, "undo_sent", sent)
	field(b, "undo_lost", lost)
	field(b, "undo_unconfirmed", unknown)
	field(b, "split_vote_retries", s.cfg.Engine.Retries())
	field(b, "scripts_known", s.scripts.Len())
}

// quarantineWhyNames are INFO's short names of quorum.Why.
var quarantineWhyNames = map[quorum.Why]string{
	quorum.WhyUnverified: "unchecked", quorum.WhyBootstrap: "bootstrap",
	quorum.WhyRestarted: "restarted", quorum.WhyEvicting: "evicted",
}

func fmtMs(sec float64) string { return strconv.FormatFloat(sec*1e3, 'f', 3, 64) }

// infoQuorum describes every master from memory: the engine's connection
// state and quarantine, the latency of the last PING probe and the last
// error seen. No master is asked anything, so a stuck master cannot slow
// INFO down.
func (s *Server) infoQuorum(b *strings.Builder) {
	e := s.cfg.Engine
	cfg := e.Config()
	field(b, "masters", e.N())
	field(b, "quorum", e.Q())
	field(b, "node_timeout_ms", cfg.NodeTimeout.Milliseconds())
	field(b, "max_ttl_ms", cfg.MaxTTL.Milliseconds())
	field(b, "clock_drift_factor", cfg.DriftFactor)
	var n [numStates]int
	clean := strings.NewReplacer(",", ";", "\r", " ", "\n", " ")
	for i, m := range e.Masters() {
		state := masterState(m)
		n[state]++
		latency, until, lastErr, errAt := "", "", "", ""
		if i < len(s.cfg.Metrics.masters) {
			ms := s.cfg.Metrics.masters[i]
			if ns := ms.lastLatency.Load(); ns > 0 {
				latency = fmtMs(float64(ns) / 1e9)
			}
			if le := ms.lastErr.Load(); le != nil {
				lastErr, errAt = le.text, le.at.UTC().Format(time.RFC3339)
			}
		}
		if state == stateDown {
			latency = "" // the last one measured says nothing now
			if m.Err != nil {
				lastErr, errAt = m.Err.Error(), "" // why it is down now
			}
		}
		if !m.QuarantinedUntil.IsZero() {
			until = m.QuarantinedUntil.UTC().Format(time.RFC3339Nano)
		}
		why := m.Excluded
		if why == "" && !m.QuarantinedUntil.IsZero() {
			why = quarantineWhyNames[m.QuarantineWhy]
		}
		fmt.Fprintf(b, "master%d:addr=%s,state=%s,latency_ms=%s,queued=%d,inflight=%d,quarantined_until=%s,why=%s,last_error_at=%s,last_error=%s\r\n",
			i, m.Addr, stateNames[state], latency, m.Queued, m.Inflight, until, clean.Replace(why), errAt, clean.Replace(lastErr))
	}
	field(b, "masters_up", n[stateUp]+n[stateQuarantined]+n[stateExcluded])
	field(b, "masters_down", n[stateDown])
	field(b, "masters_quarantined", n[stateQuarantined])
	field(b, "masters_excluded", n[stateExcluded])
	field(b, "quorum_available", map[bool]int{false: 0, true: 1}[n[stateUp] >= e.Q()])
}

// cmdConfig: CONFIG GET pattern… answers lockproxy's settings (and the
// persistence settings redis-benchmark asks for). CONFIG SET and others are
// refused: lockproxy is configured by its file.
func cmdConfig(s *Server, c *client, args [][]byte) {
	if strings.ToLower(string(args[1])) != "get" || len(args) < 3 {
		c.errorf("ERR unknown or unsupported command 'config %s': lockproxy supports CONFIG GET only; it is configured by config.toml", clip(args[1]))
		return
	}
	cfg := s.cfg.Engine.Config()
	params := map[string]string{
		"save":               "",
		"appendonly":         "no",
		"maxclients":         strconv.Itoa(s.cfg.MaxClients),
		"timeout":            strconv.Itoa(int(s.cfg.IdleTimeout / time.Second)),
		"handshake-timeout":  s.cfg.HandshakeTimeout.String(),
		"databases":          "1",
		"node-timeout":       cfg.NodeTimeout.String(),
		"max-ttl":            cfg.MaxTTL.String(),
		"clock-drift-factor": strconv.FormatFloat(cfg.DriftFactor, 'g', -1, 64),
		"masters":            strings.Join(cfg.Masters, ","),
		"default-ttl":        s.cfg.DefaultTTL.String(),
	}
	var pairs [][2]string
	for _, pat := range args[2:] {
		p := strings.ToLower(string(pat))
		names := make([]string, 0, len(params))
		for k := range params {
			if ok, _ := path.Match(p, k); ok {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		for _, k := range names {
			pairs = append(pairs, [2]string{k, params[k]})
		}
	}
	resp3 := c.resp3
	c.local(func(b []byte) []byte {
		b = appendMapHeader(b, len(pairs), resp3)
		for _, p := range pairs {
			b = appendBulkString(b, p[0])
			b = appendBulkString(b, p[1])
		}
		return b
	})
}
