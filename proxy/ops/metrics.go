// Package ops is what an operator sees of lockproxy: Prometheus metrics,
// the INFO sections, and the master probes.
//
// cmd/lockproxy builds one Metrics (NewMetrics), gives its hooks to the
// engine (quorum.Config.OnBatch, OnReply, OnMiss, OnMasterState, Dial),
// starts the PING probes (StartProbes) and hands it to the front end
// (proxy.Config.Metrics), which counts requests, connections and script
// lookups on it. /metrics (WritePrometheus) and INFO (Info) read the same
// counters, with what they sample of the engine and of the front end
// (Sources). Nothing here is on a request's path but the counting, which
// takes no lock.
package ops

import (
	"fmt"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/quorum"
)

// Metrics are lockproxy's Prometheus metrics: the front end's requests and
// connections, and what lockproxy observes of each master. They live in a
// metrics.Set that WritePrometheus writes on /metrics; INFO reads the
// same counters.
//
// The per-request path (Metrics.Outcome, Metrics.Request) takes no lock and
// allocates nothing: every counter it can touch is created up front and
// found by array index, and the decision latency histogram is a set of
// atomic buckets (see histogram). Everything else is sampled when /metrics
// is scraped.
type Metrics struct {
	set *metrics.Set

	connections  *metrics.Gauge   // open client connections
	accepted     *metrics.Counter // set from the front end at scrape
	rejected     *metrics.Counter // set from the front end at scrape
	authFailures *metrics.Counter
	hits, miss   *metrics.Counter // script catalog
	undoSent     *metrics.Counter // set from the engine at scrape
	undoLost     *metrics.Counter
	undoUnknown  *metrics.Counter
	splitRetries *metrics.Counter
	available    *metrics.Gauge // 1 when Q masters count

	// requests[op][outcome]; nil where the pair cannot happen.
	requests [numOps][numOutcomes]*metrics.Counter
	decision [numOps]*histogram

	masters []*masterStats // by master index
	byAddr  map[string]*masterStats
}

// op is the lock operation a request performs: the label "op".
type op uint8

const (
	opAcquire op = iota // SET NX, SETNX, acquire scripts
	opRelease           // release scripts, DEL/UNLINK
	opExtend            // PEXPIRE/EXPIRE, extend scripts
	opRead              // GET, PTTL/TTL, EXISTS, read scripts
	opCounter           // INCR/INCRBY (fencing counters)
	opOther             // commands lockproxy refuses
	numOps
)

var opNames = [numOps]string{"acquire", "release", "extend", "read", "counter", "other"}

func opOf(k quorum.Kind) op {
	switch k {
	case quorum.Acquire, quorum.AcquireOrExtend:
		return opAcquire
	case quorum.Release:
		return opRelease
	case quorum.Extend:
		return opExtend
	case quorum.Read:
		return opRead
	case quorum.Counter:
		return opCounter
	}
	return opOther
}

// outcome is how a request ended: the label "outcome".
type outcome uint8

const (
	outAcquired  outcome = iota // acquire: a quorum said yes with validity left
	outContended                // acquire: not acquired (held, or validity ran out)
	outExtended                 // extend: a quorum moved the expiry
	outNotHeld                  // extend: the lock was not held by the token
	outOK                       // release, read: a quorum answered
	outNoQuorum                 // fewer than Q masters answered
	outError                    // an error reply (bad arguments, refused command, master error)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"acquired", "contended", "extended", "notheld", "ok", "noquorum", "error"}

// validOutcomes lists the series created for each op, so that every series
// exists from the start (rate() needs the zero) and no meaningless one does.
var validOutcomes = [numOps][]outcome{
	opAcquire: {outAcquired, outContended, outNoQuorum, outError},
	opRelease: {outOK, outNoQuorum, outError},
	opExtend:  {outExtended, outNotHeld, outNoQuorum, outError},
	opRead:    {outOK, outNoQuorum, outError},
	opCounter: {outOK, outNoQuorum, outError},
	opOther:   {outError},
}

// decisionBuckets are the upper bounds, in seconds, of the decision latency
// histogram: fine below a millisecond, where a healthy local quorum decides,
// and up to the seconds a request can wait behind others on its key.
var decisionBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// NewMetrics registers lockproxy's metrics in set (a new Set if nil), with
// per-master series for masters (quorum.Config.Masters, in order).
func NewMetrics(set *metrics.Set, masters []string) *Metrics {
	if set == nil {
		set = metrics.NewSet()
	}
	m := &Metrics{set: set, byAddr: map[string]*masterStats{}}
	m.connections = set.NewGauge("lockproxy_client_connections", nil)
	m.accepted = set.NewCounter("lockproxy_client_connections_total")
	m.rejected = set.NewCounter("lockproxy_client_connections_rejected_total")
	m.authFailures = set.NewCounter("lockproxy_auth_failures_total")
	m.hits = set.NewCounter(`lockproxy_script_catalog_total{result="hit"}`)
	m.miss = set.NewCounter(`lockproxy_script_catalog_total{result="miss"}`)
	m.undoSent = set.NewCounter(`lockproxy_undo_total{result="sent"}`)
	m.undoLost = set.NewCounter(`lockproxy_undo_total{result="lost"}`)
	m.undoUnknown = set.NewCounter(`lockproxy_undo_total{result="unconfirmed"}`)
	m.splitRetries = set.NewCounter(`lockproxy_split_vote_retries_total`)
	m.available = set.NewGauge("lockproxy_quorum_available", nil)
	for o := range numOps {
		for _, oc := range validOutcomes[o] {
			m.requests[o][oc] = set.NewCounter(`lockproxy_requests_total{op="` + opNames[o] + `",outcome="` + outcomeNames[oc] + `"}`)
		}
		if o != opOther {
			m.decision[o] = newHistogram(`op="`+opNames[o]+`"`, decisionBuckets)
		}
	}
	set.RegisterMetricsWriter(m.writeDecision)
	for i, addr := range masters {
		ms := newMasterStats(set, i, addr)
		m.masters = append(m.masters, ms)
		m.byAddr[addr] = ms
	}
	return m
}

// Set is the metrics set, for callers that add their own series.
func (m *Metrics) Set() *metrics.Set { return m.set }

// Request counts a command that ended without a quorum request (rejected
// while parsing), by command name and outcome name. Lock-free: the names
// are matched by switch, not looked up in a map.
func (m *Metrics) Request(cmd, result string) {
	o := opOther
	switch cmd {
	case "set", "setnx":
		o = opAcquire
	case "incr", "incrby", "decr", "decrby":
		o = opCounter
	}
	oc := outError
	for i, n := range outcomeNames {
		if n == result {
			oc = outcome(i)
		}
	}
	m.count(o, oc)
}

func (m *Metrics) count(o op, oc outcome) {
	c := m.requests[o][oc]
	if c == nil {
		c = m.requests[o][outError]
	}
	c.Inc()
}

// ScriptHit counts an EVAL or EVALSHA of a script lockproxy runs.
func (m *Metrics) ScriptHit() { m.hits.Inc() }

// ScriptMiss counts an EVAL or EVALSHA refused: NOSCRIPT, or a script
// lockproxy does not run.
func (m *Metrics) ScriptMiss() { m.miss.Inc() }

// AuthFailure counts a wrong password (AUTH, HELLO … AUTH).
func (m *Metrics) AuthFailure() { m.authFailures.Inc() }

// ConnOpened counts a client connection admitted.
func (m *Metrics) ConnOpened() { m.connections.Inc() }

// ConnClosed counts an admitted client connection gone.
func (m *Metrics) ConnClosed() { m.connections.Dec() }

// Outcome counts a decided request by op and outcome, and its latency from
// parse to the quorum decision. It runs once per request on the connection's goroutine.
func (m *Metrics) Outcome(r *quorum.Request) {
	o := opOf(r.Kind())
	var oc outcome
	switch r.Outcome() {
	case quorum.NoQuorum:
		oc = outNoQuorum
	case quorum.Failed:
		oc = outError
	case quorum.Granted:
		oc = outAcquired
		if o == opExtend {
			oc = outExtended
		}
	case quorum.Refused:
		oc = outContended
	case quorum.NotHeld:
		oc = outNotHeld
		if o != opExtend {
			oc = outOK // a release or read of a lock not held: answered
		}
	default:
		oc = outOK
	}
	m.count(o, oc)
	if h := m.decision[o]; h != nil {
		if took := r.Took(); took > 0 {
			h.observe(int64(took))
		}
	}
}

// counts returns the request counters for INFO stats, as
// requests_<op>_<outcome>, in a stable order.
func (m *Metrics) counts(f func(name string, v uint64)) {
	for o := range numOps {
		for _, oc := range validOutcomes[o] {
			f("requests_"+opNames[o]+"_"+outcomeNames[oc], m.requests[o][oc].Get())
		}
	}
}

func (m *Metrics) writeDecision(w io.Writer) {
	const name = "lockproxy_quorum_decision_seconds"
	metrics.WriteMetadataIfNeeded(w, name, "histogram")
	var b []byte
	for _, h := range m.decision {
		if h != nil {
			b = h.append(b, name)
		}
	}
	w.Write(b)
}

// WritePrometheus samples what is read at scrape time (master states, queue
// depths, connection totals) and writes every metric in Prometheus text
// format.
func WritePrometheus(w io.Writer, src Sources) {
	m := src.Metrics
	e := src.Engine
	m.accepted.Set(uint64(src.Front.Accepted))
	m.rejected.Set(uint64(src.Front.Rejected))
	sent, lost, unknown := e.UndoStats()
	m.undoSent.Set(uint64(sent))
	m.undoLost.Set(uint64(lost))
	m.undoUnknown.Set(uint64(unknown))
	m.splitRetries.Set(uint64(e.Retries()))
	counting := 0
	masters := e.Masters()
	for i, st := range masters {
		state := masterState(st)
		if state == stateUp {
			counting++
		}
		if i >= len(m.masters) {
			continue
		}
		ms := m.masters[i]
		for j, g := range ms.state {
			g.Set(b2f(j == int(state)))
		}
		ms.up.Set(b2f(st.Up))
		ms.queue.Set(float64(st.Queued + st.Inflight))
		until := 0.0
		if !st.QuarantinedUntil.IsZero() {
			until = float64(st.QuarantinedUntil.UnixMilli()) / 1e3
		}
		ms.quarantinedUntil.Set(until)
	}
	m.available.Set(b2f(counting >= e.Q()))
	m.set.WritePrometheus(w)
	writeServerInfo(w, masters)
}

// writeServerInfo writes lockproxy_master_server_info, 1 for each master
// whose version was read, its version in the labels: they change when a
// master is upgraded, so the series are written at scrape, not registered.
func writeServerInfo(w io.Writer, masters []quorum.MasterStatus) {
	const name = "lockproxy_master_server_info"
	var b []byte
	for _, st := range masters {
		v := st.Server
		if v.Server == "" {
			continue
		}
		if b == nil {
			var meta strings.Builder
			metrics.WriteMetadataIfNeeded(&meta, name, "gauge")
			b = append(b, meta.String()...)
		}
		b = fmt.Appendf(b, "%s{master=%q,server=%q,version=%q,redis_version=%q} 1\n", name, st.Addr, v.Server, v.Version, v.Redis)
	}
	w.Write(b)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
