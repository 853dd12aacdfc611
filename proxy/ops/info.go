package ops

import (
	"fmt"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Sources are what INFO and /metrics read: the counters here, the engine's
// state, and the front end's own counters.
type Sources struct {
	Metrics *Metrics
	Engine  *quorum.Engine
	Front   Front
}

// Front is the RESP front end's account of itself, taken when INFO is
// asked or /metrics is scraped (proxy.Server fills it in). A value, not
// an interface: ops only reads it, and a test can write one down.
type Front struct {
	RedisVersion string    // the Redis version clients are told (redis_version)
	Version      string    // lockproxy's version (lockproxy_version)
	Commit       string    // and commit (lockproxy_commit)
	ConfigFile   string    // the configuration file's path
	Started      time.Time // for uptime

	Clients      int64 // connected clients
	MaxClients   int
	RequirePass  bool
	InputBytes   int64 // held in client input buffers, all connections
	OutputBytes  int64 // held besides them (replies not yet written, transactions, names), charged to the same budget
	SharedBytes  int64 // pub/sub payloads subscribers hold, each counted once however many share it, bounded by the same limit
	InputLimit   int64 // client_query_buffer_total
	ScriptsKnown int   // sha1s EVALSHA finds: the catalog's and the learned ones

	Accepted        int64 // connections admitted, since start
	Rejected        int64 // connections refused at max_clients
	ProtocolErrors  int64 // connections closed for a protocol error or limit
	Evicted         int64 // connections closed for client_query_buffer_total
	IdleCloses      int64 // connections closed by idle_timeout
	HandshakeCloses int64 // connections closed by handshake_timeout
	WriteCloses     int64 // connections closed for not reading their replies (write timeout)
	TurnYields      int64 // pipelines that used up their turn of the event loop and went on at a later one

	Blocked int64 // clients blocked in BLPOP/BRPOP
	// Repushed counts elements popped for BLPOP clients that hung up
	// during the round and put back on the masters (no waiter here).
	Repushed int64
	// PopRounds counts BLPOP pop rounds in flight (one EVALSHA per master each).
	PopRounds int64
	PubSub    *PubSub // the pub/sub hub's figures; nil: pub/sub is off
}

// PubSub is what INFO's pubsub section shows.
type PubSub struct {
	Stats             pubsub.Stats
	KeyspaceEvents    string // notify-keyspace-events of this proxy
	OutputLimitCloses int64  // subscribers closed over their output limits
}

// infoSections are INFO's sections, in the order a plain INFO gives them.
var infoSections = []struct {
	name string
	fn   func(*strings.Builder, *Sources)
}{
	{"server", infoServer},
	{"clients", infoClients},
	{"persistence", infoPersistence},
	{"stats", infoStats},
	{"replication", infoReplication},
	{"keyspace", infoKeyspace},
	{"quorum", infoQuorum},
	{"pubsub", infoPubSub},
}

// Info is INFO's text for the sections named (any case; none, "all",
// "everything" or "default": every one). It describes lockproxy, never a
// master, from memory: no master is asked anything, so a stuck master
// cannot slow INFO down.
func Info(sections []string, src Sources) string {
	want := map[string]bool{}
	for _, a := range sections {
		want[strings.ToLower(a)] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	for _, sec := range infoSections {
		if !all && !want[sec.name] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(sec.name[:1]) + sec.name[1:] + "\r\n")
		sec.fn(&b, &src)
	}
	return b.String()
}

func field(b *strings.Builder, k string, v any) { fmt.Fprintf(b, "%s:%v\r\n", k, v) }

func infoServer(b *strings.Builder, src *Sources) {
	f := &src.Front
	field(b, "redis_version", f.RedisVersion)
	field(b, "lockproxy_version", f.Version)
	field(b, "lockproxy_commit", f.Commit)
	field(b, "redis_mode", "standalone")
	field(b, "os", runtime.GOOS+" "+runtime.GOARCH)
	field(b, "arch_bits", strconv.IntSize)
	field(b, "process_id", os.Getpid())
	field(b, "go_version", runtime.Version())
	up := time.Since(f.Started)
	field(b, "uptime_in_seconds", int64(up.Seconds()))
	field(b, "uptime_in_days", int64(up.Hours()/24))
	field(b, "config_file", f.ConfigFile)
	field(b, "masters", src.Engine.N())
	field(b, "quorum", src.Engine.Q())
}

func infoClients(b *strings.Builder, src *Sources) {
	f := &src.Front
	field(b, "connected_clients", f.Clients)
	field(b, "maxclients", f.MaxClients)
	field(b, "blocked_clients", f.Blocked)
	field(b, "blocked_elements_repushed", f.Repushed)
	field(b, "blocked_pop_rounds", f.PopRounds)
	field(b, "requirepass", map[bool]string{false: "no", true: "yes"}[f.RequirePass])
	field(b, "client_input_bytes", f.InputBytes)
	field(b, "client_output_bytes", f.OutputBytes)
	field(b, "client_shared_payload_bytes", f.SharedBytes)
	field(b, "client_query_buffer_total", f.InputLimit)
}

// infoPersistence answers what client ready checks look for.
func infoPersistence(b *strings.Builder, _ *Sources) {
	field(b, "loading", 0)
	field(b, "async_loading", 0)
}

func infoReplication(b *strings.Builder, _ *Sources) {
	field(b, "role", "master")
	field(b, "connected_slaves", 0)
}

// infoKeyspace is empty: lockproxy keeps no keys of its own, and counting
// the masters' would take a round trip.
func infoKeyspace(b *strings.Builder, _ *Sources) {}

// infoStats has the counters of /metrics, under INFO-style names.
func infoStats(b *strings.Builder, src *Sources) {
	m, f := src.Metrics, &src.Front
	field(b, "total_connections_received", f.Accepted)
	field(b, "rejected_connections", f.Rejected)
	field(b, "protocol_errors", f.ProtocolErrors)
	field(b, "evicted_clients", f.Evicted)
	field(b, "idle_timeout_closes", f.IdleCloses)
	field(b, "handshake_timeout_closes", f.HandshakeCloses)
	field(b, "write_timeout_closes", f.WriteCloses)
	field(b, "client_turn_yields", f.TurnYields)
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
	sent, lost, unknown := src.Engine.UndoStats()
	field(b, "undo_sent", sent)
	field(b, "undo_lost", lost)
	field(b, "undo_unconfirmed", unknown)
	field(b, "split_vote_retries", src.Engine.Retries())
	field(b, "scripts_known", f.ScriptsKnown)
	field(b, "master_script_flushes", src.Engine.ScriptFlushes())
	field(b, "large_commands_refused", src.Engine.BigRefused())
	field(b, "publish_match_refused", src.Engine.MatchWorkRefused())
}

// quarantineWhyNames are INFO's short names of quorum.Why.
var quarantineWhyNames = map[quorum.Why]string{
	quorum.WhyUnverified: "unchecked", quorum.WhyBootstrap: "bootstrap",
	quorum.WhyRestarted: "restarted", quorum.WhyEvicting: "evicted",
}

func fmtMs(sec float64) string { return strconv.FormatFloat(sec*1e3, 'f', 3, 64) }

// infoQuorum describes every master from memory: the engine's connection
// state and quarantine, the latency of the last PING probe and the last
// error seen.
func infoQuorum(b *strings.Builder, src *Sources) {
	e := src.Engine
	cfg := e.Config()
	field(b, "masters", e.N())
	field(b, "quorum", e.Q())
	field(b, "node_timeout_ms", cfg.NodeTimeout.Milliseconds())
	field(b, "max_ttl_ms", cfg.MaxTTL.Milliseconds())
	field(b, "clock_drift_factor", cfg.DriftFactor)
	var n [numStates]int
	pending := 0
	clean := strings.NewReplacer(",", ";", "\r", " ", "\n", " ")
	for i, m := range e.Masters() {
		state := masterState(m)
		n[state]++
		latency, until, lastErr, errAt := "", "", "", ""
		if i < len(src.Metrics.masters) {
			ms := src.Metrics.masters[i]
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
		counters := "ok"
		if m.CountersPending {
			counters = "pending" // lost its data; its counters not restored yet: no vote on them
			pending++
		}
		// The master's own version (empty until its first connection read
		// it); a refused one is down, last_error saying why.
		v := m.Server
		fmt.Fprintf(b, "master%d:addr=%s,state=%s,latency_ms=%s,queued=%d,inflight=%d,quarantined_until=%s,why=%s,last_error_at=%s,last_error=%s,counters=%s,server=%s,version=%s,redis_version=%s\r\n",
			i, m.Addr, stateNames[state], latency, m.Queued, m.Inflight, until, clean.Replace(why), errAt, clean.Replace(lastErr), counters,
			clean.Replace(v.Server), clean.Replace(v.Version), clean.Replace(v.Redis))
	}
	field(b, "masters_up", n[stateUp]+n[stateQuarantined]+n[stateExcluded])
	field(b, "masters_down", n[stateDown])
	field(b, "masters_quarantined", n[stateQuarantined])
	field(b, "masters_excluded", n[stateExcluded])
	field(b, "masters_counters_pending", pending)
	field(b, "quorum_available", map[bool]int{false: 0, true: 1}[n[stateUp] >= e.Q()])
}

// infoPubSub is the pub/sub hub's figures (proxy/pubsub).
func infoPubSub(b *strings.Builder, src *Sources) {
	p := src.Front.PubSub
	if p == nil {
		field(b, "pubsub_enabled", 0)
		return
	}
	st := &p.Stats
	field(b, "pubsub_enabled", 1)
	field(b, "pubsub_masters_up", st.MastersUp)
	field(b, "pubsub_channels", st.Channels)
	field(b, "pubsub_subscriptions", st.Subscriptions)
	field(b, "pubsub_delivered", st.Delivered)
	field(b, "pubsub_duplicates_dropped", st.Duplicates)
	field(b, "pubsub_held_timeouts", st.HeldTimeouts)
	field(b, "pubsub_held_redelivered", st.HeldRedelivered)
	field(b, "pubsub_dedup_entries", st.DedupEntries)
	field(b, "pubsub_dedup_evicted", st.DedupEvicted)
	field(b, "pubsub_oversize_skipped", st.Oversize)
	field(b, "pubsub_output_limit_closes", p.OutputLimitCloses)
	field(b, "pubsub_events", st.Events)
	field(b, "pubsub_event_duplicates", st.EventDuplicates)
	field(b, "pubsub_expiries_scheduled", st.Expiries)
	field(b, "pubsub_expiries_dropped", st.ExpiriesDropped)
	field(b, "notify_keyspace_events", p.KeyspaceEvents)
}
