package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// What lockproxy observes of each master, for /metrics and INFO quorum:
// connection state and errors (hooks the engine calls), pipelined batch
// sizes, and round-trip latency from a light health probe that sends PING
// on its own connection. Nothing here is on a request's path.

// mstate is a master's state as INFO and lockproxy_master_state say it.
type mstate uint8

const (
	stateUp          mstate = iota // connected, its votes count
	stateDown                      // not connected; lockproxy redials
	stateQuarantined               // connected, votes do not count until quarantined_until
	stateExcluded                  // connected, votes do not count while it may evict keys (or is unchecked)
	numStates
)

var stateNames = [numStates]string{"up", "down", "quarantined", "excluded"}

func masterState(st quorum.MasterStatus) mstate {
	switch {
	case !st.Up:
		return stateDown
	case st.Excluded != "":
		return stateExcluded
	case !st.QuarantinedUntil.IsZero():
		return stateQuarantined
	}
	return stateUp
}

// batchBuckets bound the batch size histogram: commands per pipelined write.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// latencyBuckets bound the probe round-trip histogram, in seconds.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

type masterStats struct {
	addr string

	up, queue, quarantinedUntil  *metrics.Gauge // sampled at scrape
	state                        [numStates]*metrics.Gauge
	changes                      *metrics.Counter
	errDial, errDown, errProbe   *metrics.Counter
	missTimeout, missDown, missQ *metrics.Counter // votes that did not count
	missExcluded                 *metrics.Counter
	batch, latency               *metrics.PrometheusHistogram
	rtt                          *metrics.PrometheusHistogram // real commands, write to reply

	lastLatency atomic.Int64 // ns of the last successful probe; 0: none yet
	lastErr     atomic.Pointer[masterErr]
}

type masterErr struct {
	text string
	at   time.Time
}

func newMasterStats(set *metrics.Set, i int, addr string) *masterStats {
	l := fmt.Sprintf(`master=%q`, addr)
	ms := &masterStats{addr: addr}
	ms.up = set.NewGauge("lockproxy_master_up{"+l+"}", nil)
	for s := range numStates {
		ms.state[s] = set.NewGauge("lockproxy_master_state{"+l+`,state="`+stateNames[s]+`"}`, nil)
	}
	ms.queue = set.NewGauge("lockproxy_master_queue_depth{"+l+"}", nil)
	ms.quarantinedUntil = set.NewGauge("lockproxy_master_quarantined_until_seconds{"+l+"}", nil)
	ms.changes = set.NewCounter("lockproxy_master_state_changes_total{" + l + "}")
	ms.errDial = set.NewCounter("lockproxy_master_errors_total{" + l + `,type="dial"}`)
	ms.errDown = set.NewCounter("lockproxy_master_errors_total{" + l + `,type="disconnect"}`)
	ms.errProbe = set.NewCounter("lockproxy_master_errors_total{" + l + `,type="probe"}`)
	ms.missTimeout = set.NewCounter("lockproxy_master_missed_votes_total{" + l + `,reason="timeout"}`)
	ms.missDown = set.NewCounter("lockproxy_master_missed_votes_total{" + l + `,reason="unavailable"}`)
	ms.missQ = set.NewCounter("lockproxy_master_missed_votes_total{" + l + `,reason="quarantined"}`)
	ms.missExcluded = set.NewCounter("lockproxy_master_missed_votes_total{" + l + `,reason="excluded"}`)
	ms.batch = set.NewPrometheusHistogramExt("lockproxy_master_batch_size{"+l+"}", batchBuckets)
	ms.latency = set.NewPrometheusHistogramExt("lockproxy_master_latency_seconds{"+l+"}", latencyBuckets)
	ms.rtt = set.NewPrometheusHistogramExt("lockproxy_master_rtt_seconds{"+l+"}", latencyBuckets)
	return ms
}

func (ms *masterStats) setErr(err error) {
	ms.lastErr.Store(&masterErr{text: err.Error(), at: time.Now()})
}

// DialFunc connects to a master: the type of quorum.Config.Dial. An alias,
// so that any named dialer of that shape (proxy.MasterTLS's, pubsub's)
// is one without a conversion.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// OnBatch is quorum.Config.OnBatch: the size of each pipelined write.
func (m *Metrics) OnBatch(i, ops int) {
	if i < len(m.masters) {
		m.masters[i].batch.Update(float64(ops))
	}
}

// OnMiss is quorum.Config.OnMiss: a vote of master i that did not count.
func (m *Metrics) OnMiss(i int, why quorum.Miss) {
	if i >= len(m.masters) {
		return
	}
	switch why {
	case quorum.MissTimeout:
		m.masters[i].missTimeout.Inc()
	case quorum.MissQuarantined:
		m.masters[i].missQ.Inc()
	case quorum.MissExcluded:
		m.masters[i].missExcluded.Inc()
	default:
		m.masters[i].missDown.Inc()
	}
}

// OnReply is quorum.Config.OnReply: the round trip of each command
// lockproxy pipelined to master i, from the write of its batch to its reply.
func (m *Metrics) OnReply(i int, rtt time.Duration) {
	if i < len(m.masters) {
		m.masters[i].rtt.Update(rtt.Seconds())
	}
}

// OnMasterState is quorum.Config.OnMasterState: a master connected or
// went down.
func (m *Metrics) OnMasterState(i int, up bool, err error) {
	if i >= len(m.masters) {
		return
	}
	ms := m.masters[i]
	ms.changes.Inc()
	if !up {
		ms.errDown.Inc()
		if err != nil {
			ms.setErr(err)
		}
	}
}

// Dial wraps next (nil: plain TCP) for quorum.Config.Dial, counting failed
// connection attempts per master.
func (m *Metrics) Dial(next DialFunc) DialFunc {
	if next == nil {
		d := &net.Dialer{KeepAlive: 15 * time.Second}
		next = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			if ms := m.byAddr[addr]; ms != nil {
				ms.errDial.Inc()
				ms.setErr(err)
			}
		}
		return c, err
	}
}

// ProbeOptions configure StartProbes. Zero values get the defaults.
type ProbeOptions struct {
	// Interval between two PINGs to a master. Default 1s.
	Interval time.Duration
	// Timeout bounds connecting and one PING. Default Interval, at most 1s.
	Timeout time.Duration
	// Dial connects (TLS for TLS masters); default plain TCP.
	Dial DialFunc
	// Username and Password authenticate each new probe connection, as
	// quorum.Config's MasterUsername and MasterPassword do the engine's.
	// Empty Password: no AUTH.
	Username, Password string
	Logger             *slog.Logger
}

// StartProbes PINGs every master on a connection of its own every
// Interval, for the latency that INFO and lockproxy_master_latency_seconds
// report. A PING waits behind whatever the master is running, so the
// latency is what lockproxy's own commands meet. A probe that fails is
// counted and logged once per outage; it also notices a master that stopped
// answering while its pipelined connection still looks up. stop ends the
// probes and waits for them.
func (m *Metrics) StartProbes(o ProbeOptions) (stop func()) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = min(o.Interval, time.Second)
	}
	if o.Dial == nil {
		d := &net.Dialer{}
		o.Dial = d.DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ms := range m.masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms.probeLoop(ctx, o)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

func (ms *masterStats) probeLoop(ctx context.Context, o ProbeOptions) {
	p := &prober{addr: ms.addr, o: o}
	defer p.close()
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	failing := false
	for {
		d, err := p.ping(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			ms.errProbe.Inc()
			ms.setErr(fmt.Errorf("probe: %w", err))
			if !failing {
				o.Logger.Warn("master does not answer lockproxy's PING probe", "master", ms.addr, "err", err)
			}
			failing = true
		default:
			ms.latency.Update(d.Seconds())
			ms.lastLatency.Store(max(int64(d), 1))
			if failing {
				o.Logger.Info("master answers lockproxy's PING probe again", "master", ms.addr, "latency", d)
			}
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prober is one master's probe connection.
type prober struct {
	addr string
	o    ProbeOptions
	conn net.Conn
	rd   *resp.Reader
	stop func() bool // unregisters the close-on-cancel
}

var pingCmd = resp.AppendCommandString(nil, "PING")

// ping sends one PING, connecting first if needed, and returns the round
// trip. Any surprise closes the connection, so replies never go out of step.
func (p *prober) ping(ctx context.Context) (time.Duration, error) {
	if p.conn == nil {
		if err := p.connect(ctx); err != nil {
			return 0, err
		}
	}
	p.conn.SetDeadline(time.Now().Add(p.o.Timeout))
	t0 := time.Now()
	if _, err := p.conn.Write(pingCmd); err != nil {
		p.close()
		return 0, err
	}
	r, err := p.rd.Next()
	d := time.Since(t0)
	if err != nil {
		p.close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, fmt.Errorf("no PONG within %v", p.o.Timeout)
		}
		return 0, err
	}
	if r.Type != resp.Status || string(r.Str) != "PONG" {
		p.close()
		return 0, fmt.Errorf("PING answered %q", r.String())
	}
	return d, nil
}

func (p *prober) connect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	conn, err := p.o.Dial(dctx, "tcp", p.addr)
	cancel()
	if err != nil {
		return err
	}
	p.conn, p.rd = conn, resp.NewReader(conn, 512)
	p.stop = context.AfterFunc(ctx, func() { conn.Close() }) // unblock a read at stop
	auth := resp.AppendAuth(nil, p.o.Username, p.o.Password)
	if len(auth) == 0 {
		return nil
	}
	conn.SetDeadline(time.Now().Add(p.o.Timeout))
	if _, err := conn.Write(auth); err != nil {
		p.close()
		return err
	}
	r, err := p.rd.Next()
	if err != nil {
		p.close()
		return err
	}
	if r.Type != resp.Status {
		p.close()
		return fmt.Errorf("AUTH answered %q", r.String())
	}
	return nil
}

func (p *prober) close() {
	if p.conn == nil {
		return
	}
	p.stop()
	p.conn.Close()
	p.conn, p.rd = nil, nil
}
