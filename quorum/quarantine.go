package quorum

// Restart quarantine. A master restarted without persistence has lost the
// keys of locks that may still be valid: if its votes counted at once, a
// second client could win a quorum made of it and the other restarted or
// lagging masters while the first holder still trusts its lock. So a master
// that lost its data does not vote until MaxTTL has passed since it came
// back: by then every lock it may have forgotten has expired.
//
// Data loss is detected in the master itself, so that the rule holds when
// lockproxy restarts meanwhile and when several lockproxy processes share
// the masters: every master carries a marker key (MarkerKey in database
// MarkerDB) that is either "ok" or the end of its quarantine in unix ms of
// the master's clock. One atomic script (markerScript) reads it and:
//
//   - missing: the master lost its data (or is brand new): set it to
//     now+max_ttl. The first lockproxy to look decides the end; the others
//     read it.
//   - a future end: quarantined until then.
//   - a past end: set "ok".
//
// The script takes "now" from the master's own clock (TIME), so proxies with
// different clocks agree, and lockproxy converts the remaining time to its
// own clock when it receives the answer.
//
// Between checks, what proves that a master did not lose its data is that
// lockproxy's pipeline connection to it never broke: a restarted process
// cannot keep a TCP connection. So every time a master's pipeline
// (re)connects, its votes stop counting ("provisional" quarantine of
// max_ttl, itself a valid quarantine if no check ever succeeds) until a
// check that started after the reconnection answers. The checks run on a
// separate connection (rueidis, one client per master); a check that
// answers "ok" on the same address after the pipeline connected proves the
// pipeline talks to a master that has held its marker for max_ttl (a process
// started after the reconnection would have had to wait max_ttl for "ok").
//
// The marker lives in its own database (MarkerDB) because lockproxy's
// clients only ever reach database 0: no client command, DEL or catalogued
// script can touch it, so no client can force a quarantine on everyone.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

const (
	// MarkerKey is the key lockproxy keeps on every master: "ok", or the
	// end of the master's quarantine in unix ms (master clock).
	MarkerKey = "lockproxy:marker"
	// MarkerDB is the database of MarkerKey, out of reach of clients.
	MarkerDB = 1
)

// Timings of the quarantine monitor.
const (
	// checkTimeout bounds one marker check (dial included).
	checkTimeout = time.Second
	// bootstrapWait is how long bootstrap waits for every master to answer
	// at start; a master silent longer means lockproxy cannot tell a new
	// deployment from one that lost its data, and bootstrap is skipped.
	bootstrapWait = 5 * time.Second
)

// markerScript checks and maintains the marker atomically. KEYS[1] is the
// marker, ARGV[1] max_ttl in ms, ARGV[2] the mode: "peek" (never create it),
// "bootstrap" (create it as "ok"), "check" (create it as a quarantine). It
// returns {master_now_ms, state, end_ms}: state "none" (peek only), "ok",
// "new" (quarantine just started) or "quarantined".
const markerScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('GET', KEYS[1])
if v == 'ok' then return {now, 'ok', 0} end
local till = tonumber(v)
if v and till then
  if till <= now then
    if ARGV[2] ~= 'peek' then redis.call('SET', KEYS[1], 'ok') end
    return {now, 'ok', 0}
  end
  return {now, 'quarantined', till}
end
if ARGV[2] == 'peek' and not v then return {now, 'none', 0} end
if ARGV[2] == 'bootstrap' and not v then
  redis.call('SET', KEYS[1], 'ok')
  return {now, 'ok', 0}
end
till = now + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%d', till))
return {now, 'new', till}
`

// Master verification states, as the monitor sees them.
const (
	unverified  = iota // pipeline (re)connected, no check answered since
	verifiedOK         // marker "ok" seen after the last reconnection
	quarantined        // marker holds a future end
)

// quarantineMonitor runs one watch goroutine per master.
type quarantineMonitor struct {
	e        *Engine
	script   *rueidis.Lua
	maxTTL   string // ARGV[1]
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	watches  []*watch
	boot     bootstrapVote
	stopBoot func() bool // stops the bootstrap timer
}

// watch is one master's monitor.
type watch struct {
	m    *quarantineMonitor
	i    int
	addr string
	kick chan struct{} // cap 1: check now

	mu      sync.Mutex // protects the fields below
	epoch   uint64     // pipeline connections so far
	state   int
	until   time.Time // quarantined: end on the local clock
	logged  time.Time // the quarantine end last logged; zero: none
	booted  bool      // ran its bootstrap-mode check
	lastErr string    // last check error, logged once
}

// bootstrapVote decides, once, whether the masters are a brand-new
// deployment: every master answered a peek and none has a marker.
type bootstrapVote struct {
	mu      sync.Mutex // protects the fields below
	decided bool
	use     bool
	seen    []int8 // per master: 0 not yet, 1 no marker, 2 marker
}

func newQuarantineMonitor(e *Engine) *quarantineMonitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &quarantineMonitor{
		e: e,
		// Running it twice is harmless (the second run reads what the first
		// wrote), so rueidis may retry it on a broken connection.
		script: rueidis.NewLuaScriptRetryable(markerScript),
		maxTTL: strconv.FormatInt(e.cfg.MaxTTL.Milliseconds(), 10),
		ctx:    ctx,
		cancel: cancel,
	}
	m.boot.seen = make([]int8, e.n)
	m.boot.decided = !e.cfg.Bootstrap
	for i, addr := range e.cfg.Masters {
		m.watches = append(m.watches, &watch{m: m, i: i, addr: addr, kick: make(chan struct{}, 1)})
		// Unverified until its first check: its status says so from the
		// start (a vote could not count anyway before the pipeline
		// connects, which sets this again).
		e.SetQuarantine(i, time.Now().Add(e.cfg.MaxTTL))
	}
	return m
}

// onState wraps the pipelines' state callback: a (re)connected master does
// not vote until its marker has been checked on this connection's watch.
func (m *quarantineMonitor) onState(next func(int, bool, error)) func(int, bool, error) {
	return func(i int, up bool, err error) {
		if up {
			w := m.watches[i]
			w.mu.Lock()
			w.epoch++
			w.state = unverified
			m.e.SetQuarantine(i, time.Now().Add(m.e.cfg.MaxTTL))
			w.mu.Unlock()
			w.poke()
		}
		if next != nil {
			next(i, up, err)
		}
	}
}

func (m *quarantineMonitor) start() {
	if !m.boot.decided {
		t := time.AfterFunc(bootstrapWait, m.bootstrapTimeout)
		m.stopBoot = t.Stop
	}
	for _, w := range m.watches {
		m.wg.Add(1)
		go w.run()
	}
}

func (m *quarantineMonitor) stop() {
	if m.stopBoot != nil {
		m.stopBoot()
	}
	m.cancel()
	m.wg.Wait()
}

func (w *watch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run checks the marker when kicked (reconnection, bootstrap decided) and
// periodically, until the monitor stops.
func (w *watch) run() {
	defer w.m.wg.Done()
	client, err := w.newClient()
	if err != nil {
		// Only a bad option gets here (ForceSingleClient returns a client
		// even when the master is down). The master then stays in its
		// provisional quarantine after every reconnection: safe, slow.
		w.m.e.cfg.Logger.Error("cannot build the quarantine monitor's client; this master's votes count only max_ttl after each reconnection",
			"master", w.addr, "err", err)
		return
	}
	defer client.Close()
	w.poke()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-w.m.ctx.Done():
			return
		case <-w.kick:
		case <-timer.C:
		}
		next := w.check(client)
		timer.Reset(next)
	}
}

// check runs the marker script once and applies the answer. It returns
// when to check next.
func (w *watch) check(client rueidis.Client) time.Duration {
	m := w.m
	interval := m.e.cfg.QuarantineCheck
	w.mu.Lock()
	epoch := w.epoch
	mode := "check"
	if !w.booted {
		switch decided, use := m.boot.result(); {
		case !decided:
			mode = "peek"
		case use:
			mode = "bootstrap"
		}
	}
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(m.ctx, checkTimeout)
	res, err := m.script.Exec(ctx, client, []string{MarkerKey}, []string{m.maxTTL, mode}).ToArray()
	cancel()
	received := time.Now()
	var masterNow, end int64
	var state string
	if err == nil {
		masterNow, state, end, err = parseMarkerReply(res)
	}
	if err != nil {
		if m.ctx.Err() != nil {
			return interval
		}
		w.failed(err)
		return min(interval, 250*time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = ""
	if w.epoch != epoch {
		// The pipeline reconnected while we asked: this answer may be
		// about another process. Ask again.
		w.poke()
		return interval
	}
	if mode == "peek" {
		if state == "none" {
			// Blank master: wait for the bootstrap decision (it kicks us).
			m.vote(w.i, false)
			return interval
		}
		m.vote(w.i, true)
	}
	if mode == "bootstrap" || m.boot.isDecided() {
		w.booted = true
	}
	switch state {
	case "ok":
		if w.state != verifiedOK {
			if !w.logged.IsZero() {
				m.e.cfg.Logger.Info("master quarantine ended: its votes count again", "master", w.addr)
				w.logged = time.Time{}
			}
			w.state = verifiedOK
			m.e.SetQuarantine(w.i, time.Time{})
		}
		return interval
	case "new", "quarantined":
		until := received.Add(time.Duration(end-masterNow) * time.Millisecond)
		// Logged once per quarantine: a reconnection during it (which
		// checks again) or this proxy's clock reading the same end again
		// is no news.
		if w.logged.IsZero() || absDuration(until.Sub(w.logged)) > 100*time.Millisecond {
			w.logged = until
			msg := "master quarantined: its lockproxy marker says it lost its data earlier (noticed by this or another lockproxy); its votes do not count until the quarantine ends"
			if state == "new" {
				msg = "master quarantined: it carries no lockproxy marker, so it restarted without its data (or is new); its votes do not count until max_ttl has passed"
			}
			m.e.cfg.Logger.Warn(msg, "master", w.addr, "until", until.UTC().Format(time.RFC3339Nano), "max_ttl", m.e.cfg.MaxTTL)
		}
		w.state, w.until = quarantined, until
		m.e.SetQuarantine(w.i, until)
		// Look again when it ends, to mark the master "ok" and say so.
		return max(min(interval, time.Until(until)+time.Millisecond), time.Millisecond)
	}
	return interval
}

// failed records a check that got no answer. A master whose pipeline never
// broke since its last good check keeps its state: it cannot have
// restarted. An unverified one stays in its provisional quarantine.
func (w *watch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastErr == err.Error() {
		return
	}
	w.lastErr = err.Error()
	level := w.m.e.cfg.Logger.Debug
	if w.state == unverified && w.epoch > 0 {
		level = w.m.e.cfg.Logger.Warn
	}
	level("cannot check the master's lockproxy marker; retrying (an unchecked master that reconnected does not vote)",
		"master", w.addr, "db", MarkerDB, "err", err)
}

// vote records a peek during bootstrap and decides when it can.
func (m *quarantineMonitor) vote(i int, marker bool) {
	b := &m.boot
	b.mu.Lock()
	if b.decided {
		b.mu.Unlock()
		return
	}
	b.seen[i] = 1
	if marker {
		b.seen[i] = 2
	}
	blank := 0
	for _, s := range b.seen {
		if s == 2 {
			b.decided = true
			break
		}
		if s == 1 {
			blank++
		}
	}
	if blank == len(b.seen) {
		b.decided, b.use = true, true
	}
	decided, use := b.decided, b.use
	b.mu.Unlock()
	if !decided {
		return
	}
	if use {
		m.e.cfg.Logger.Info("bootstrap: no master carries a lockproxy marker, so this is a new deployment; all masters are usable at once (bootstrap = true)")
	} else {
		m.e.cfg.Logger.Info("bootstrap not needed: some master carries a lockproxy marker; masters without one are quarantined for max_ttl",
			"master", m.e.cfg.Masters[i])
	}
	m.kickAll()
}

// bootstrapTimeout: some master did not answer in time.
func (m *quarantineMonitor) bootstrapTimeout() {
	b := &m.boot
	b.mu.Lock()
	if b.decided {
		b.mu.Unlock()
		return
	}
	b.decided = true
	var silent []string
	for i, s := range b.seen {
		if s == 0 {
			silent = append(silent, m.e.cfg.Masters[i])
		}
	}
	b.mu.Unlock()
	m.e.cfg.Logger.Warn("bootstrap skipped: not every master answered, so lockproxy cannot tell a new deployment from masters that lost their data; masters without a marker are quarantined for max_ttl",
		"silent", fmt.Sprint(silent), "waited", bootstrapWait)
	m.kickAll()
}

func (m *quarantineMonitor) kickAll() {
	for _, w := range m.watches {
		w.poke()
	}
}

func (b *bootstrapVote) result() (decided, use bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.decided, b.use
}

func (b *bootstrapVote) isDecided() bool {
	d, _ := b.result()
	return d
}
