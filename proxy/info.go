package proxy

import (
	"io"

	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
)

// cmdInfo: INFO [section…]. Describes lockproxy, never a master; answered
// from memory, without a round trip (ops.Info writes the sections).
func cmdInfo(s *Server, c *client, args [][]byte) {
	sections := make([]string, len(args)-1)
	for i, a := range args[1:] {
		sections[i] = string(a)
	}
	text := ops.Info(sections, s.opsSources())
	resp3 := c.resp3
	c.local(func(out []byte) []byte { return resp.AppendVerbatim(out, text, resp3) })
}

// WritePrometheus samples what is read at scrape time (master states, queue
// depths, connection totals) and writes every metric of Config.Metrics in
// Prometheus text format.
func (s *Server) WritePrometheus(w io.Writer) { ops.WritePrometheus(w, s.opsSources()) }

// opsSources is what INFO and /metrics read: the metrics, the engine, and
// the front end's own account of itself.
func (s *Server) opsSources() ops.Sources {
	return ops.Sources{Metrics: s.cfg.Metrics, Engine: s.cfg.Engine, Front: ops.Front{
		RedisVersion: redisCompatVersion,
		Version:      s.cfg.Version,
		Commit:       s.cfg.Commit,
		ConfigFile:   s.cfg.ConfigFile,
		Started:      s.start,

		Clients:      s.clients.Load(),
		MaxClients:   s.cfg.MaxClients,
		RequirePass:  s.cfg.RequirePass != "",
		InputBytes:   s.budget.Used() - s.budget.Kept(),
		OutputBytes:  s.budget.Kept(),
		SharedBytes:  s.sharedBytes.Load(),
		InputLimit:   s.budget.Limit(),
		ScriptsKnown: s.scripts.Len(),

		Accepted:        s.accepted.Load(),
		Rejected:        s.rejected.Load(),
		ProtocolErrors:  s.ProtocolErrors(),
		Evicted:         s.budget.Evicted(),
		IdleCloses:      s.idleClosed.Load(),
		HandshakeCloses: s.handshakeClosed.Load(),
		WriteCloses:     s.writeClosed.Load(),
		TurnYields:      s.yields.Load(),

		Blocked:   s.blockedN.Load(),
		Repushed:  s.repushes.Load(),
		PopRounds: s.popRounds.Load(),
		PubSub:    s.pubsubInfo(),
	}}
}

// cmdConfig: CONFIG GET pattern… answers lockproxy's settings (and the
// persistence settings redis-benchmark asks for). CONFIG SET and others are
// refused: lockproxy is configured by its file.
func cmdConfig(s *Server, c *client, args [][]byte) {
	if strings.ToLower(string(args[1])) == "set" {
		configSet(s, c, args)
		return
	}
	if strings.ToLower(string(args[1])) != "get" || len(args) < 3 {
		c.errorf("ERR unknown or unsupported command 'config %s': lockproxy supports CONFIG GET, and CONFIG SET of notify-keyspace-events only; it is configured by config.toml", clip(args[1]))
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
	if hub := s.cfg.Hub; hub != nil {
		params["notify-keyspace-events"] = hub.KeyspaceEvents()
	}
	// Each setting once, however many patterns match it, as Redis 7
	// (config.c, configGetCommand); matched as Redis matches them, case
	// insensitively (pubsub.Match: Redis's stringmatchlen, whose time a
	// long pattern cannot blow up against these short names; path.Match
	// took half a second for a 1 MiB "*a*a…"). Once every setting matched,
	// the rest of the patterns cannot add one: 65,530 "*" rendered every
	// setting 65,530 times (40 MB per command, review helper-59).
	var pairs [][2]string
	seen := make(map[string]bool, len(params))
	for _, pat := range args[2:] {
		if len(seen) == len(params) {
			break
		}
		p := strings.ToLower(string(pat))
		names := make([]string, 0, len(params))
		for k := range params {
			if !seen[k] && pubsub.Match(p, k) {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		for _, k := range names {
			seen[k] = true
			pairs = append(pairs, [2]string{k, params[k]})
		}
	}
	resp3 := c.resp3
	c.local(func(b []byte) []byte {
		b = resp.AppendMapHeader(b, len(pairs), resp3)
		for _, p := range pairs {
			b = resp.AppendBulkString(b, p[0])
			b = resp.AppendBulkString(b, p[1])
		}
		return b
	})
}
