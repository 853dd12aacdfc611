package quorum

// The master monitor: restart quarantine, the set's longest max_ttl, and
// masters that may evict keys.
//
// Restart quarantine. A master restarted without persistence has lost the
// keys of locks that may still be valid: if its votes counted at once, a
// second client could win a quorum made of it and the other restarted or
// lagging masters while the first holder still trusts its lock. So a master
// that lost its data does not vote until the longest lock any proxy may
// have granted has expired.
//
// Data loss is detected in the master itself, so that the rule holds when
// lockproxy restarts meanwhile and when several lockproxy processes share
// the masters: every master carries a marker key (MarkerKey in database
// MarkerDB) that is either "ok" or a quarantine "q:<start>:<end>" in unix ms
// of the master's clock. One atomic script (markerScript, marker.go) reads
// it and:
//
//   - missing: the master lost its data (or is brand new): start a
//     quarantine of L from now.
//   - a quarantine: extend its end to start+L if that is later (a proxy
//     with a longer max_ttl than the one that started it), then report it,
//     or set "ok" once it has ended.
//
// L is the longest max_ttl of any proxy on the master set, not only this
// one's: proxies with different max_ttl (a rolling configuration change)
// would otherwise let a restarted master vote after the shorter one, while
// the other's longer locks still live. Every proxy records its max_ttl on
// every master at every check (a sorted set, MaxTTLKey, each entry kept
// until max_ttl plus recordGrace after its last refresh), reads back the
// longest recorded there, and uses the longest it has read from any master.
// A master's votes count for a proxy only while its record there is fresh
// (refreshed within recordGrace): so every lock a proxy grants was voted by
// masters that carry its max_ttl until that lock has expired.
//
// The script takes "now" from the master's own clock (TIME), so proxies with
// different clocks agree, and lockproxy converts the remaining time to its
// own clock when it receives the answer.
//
// Between checks, what proves that a master did not lose its data is that
// lockproxy's pipeline connection to it never broke: a restarted process
// cannot keep a TCP connection. So every time a master's pipeline
// (re)connects, its votes stop counting ("provisional" quarantine, itself a
// valid quarantine if no check ever succeeds) until a check that started
// after the reconnection answers. The checks run on a separate connection
// (rueidis, one client per master).
//
// An operator's FLUSHDB, SWAPDB or REPLICAOF empties or replaces a
// master's keys without a restart, leaving the marker "ok" and the
// connections up: keyspace.go reads what the master reports of itself in
// the same script, and quarantines it like a restarted one.
//
// Eviction. Every lock key has a TTL, so a master whose maxmemory-policy is
// anything but noeviction may evict valid locks under memory pressure
// (volatile-*), or the marker itself (allkeys-*). The monitor reads the
// policy at every check; such a master does not vote, and, once its policy
// is noeviction again, is quarantined like a restarted one, from the last
// time it was seen able to evict. A master that refuses CONFIG GET (managed
// Redis) cannot be checked: lockproxy says so once and counts its votes.
//
// The marker lives in its own database (MarkerDB) because lockproxy's
// clients only ever reach database 0: no client command, DEL or catalogued
// script can touch it, so no client can force a quarantine on everyone.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

const (
	// MarkerKey is the key lockproxy keeps on every master: "ok", or
	// "q:<start>:<end>", a quarantine in unix ms (master clock).
	MarkerKey = "lockproxy:marker"
	// MaxTTLKey records the max_ttl of every proxy using the master: a
	// sorted set of max_ttl in ms, scored by the master time (ms) until
	// which locks granted under it may live.
	MaxTTLKey = "lockproxy:maxttl"
	// bootNonceKey, followed by a random nonce per proxy process, is the
	// key a bootstrap peek leaves on a blank master (markerScript).
	bootNonceKey = "lockproxy:boot:"
	// MarkerDB is the database of MarkerKey and MaxTTLKey, out of reach of
	// clients.
	MarkerDB = 1
)

// Timings of the monitor.
const (
	// checkTimeout bounds one check (dial included).
	checkTimeout = time.Second
	// bootstrapWait is how long bootstrap waits for every master to answer
	// at start; a master silent longer means lockproxy cannot tell a new
	// deployment from one that lost its data, and bootstrap is skipped.
	bootstrapWait = 5 * time.Second
	// minRecordGrace is the least time a master's votes keep counting after
	// the last check that refreshed this proxy's max_ttl record on it.
	minRecordGrace = 5 * time.Second
	// bootNonceTTL is how long a peek's nonce lives: a master whose
	// bootstrap check has not answered by then is quarantined, not trusted.
	bootNonceTTL = bootstrapWait + time.Minute
)

// Master verification states, as the monitor sees them.
const (
	unverified  = iota // pipeline (re)connected, no check answered since
	verifiedOK         // marker "ok" seen after the last reconnection
	quarantined        // marker holds a future end
)

// monitor runs one watch goroutine per master.
type monitor struct {
	e        *Engine
	script   *rueidis.Lua
	markers  bool          // the restart quarantine is on
	ownTTL   int64         // this proxy's max_ttl, ms
	grace    time.Duration // recordGrace
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	watches  []*watch
	boot     bootstrapVote
	bootKey  string      // bootNonceKey and this monitor's nonce
	stopBoot func() bool // stops the bootstrap timer
}

// watch is one master's monitor.
type watch struct {
	m    *monitor
	i    int
	addr string
	kick chan struct{} // cap 1: check now

	mu       sync.Mutex // protects the fields below
	epoch    uint64     // pipeline connections and pushed flushes so far (flushed)
	state    int
	until    time.Time // quarantined: end on the local clock
	start    time.Time // quarantined: start on the local clock
	logged   time.Time // the quarantine end last logged; zero: none
	booted   bool      // ran its bootstrap-mode check
	lastErr  string    // last check error, logged once
	recorded int64     // the longest max_ttl (ms) this master records
	fresh    time.Time // when the last successful check started
	// since: when the master last stopped voting (a reconnection, or a
	// quarantine found by a check; the monitor's start at first). Its
	// quarantine lifts only once enough other masters answered a check
	// that started after it (liftable): what this proxy knows of their
	// max_ttl records is then no older than the master's data loss.
	// answered: when the last check that answered started.
	since, answered time.Time
	policy          policyState
	client          rueidis.Client // the checks' client, also the counters' repair's (repair.go)
	repair          repairState
	infoRefused     bool        // its INFO refused to the marker script, said once (noInfo)
	flushPing       atomic.Bool // a keepFlushWatch PING is in flight
	flushErr        string      // the flush watch's last error, logged once
	// flushRetry: no PING on the flush watch before then, while the
	// master refuses it (flushBackoff doubles up to flushBackoffMax).
	flushRetry   time.Time
	flushBackoff time.Duration
}

func newMonitor(e *Engine) *monitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &monitor{
		e: e,
		// Running it twice is harmless (the second run reads what the first
		// wrote), so rueidis may retry it on a broken connection.
		script:  rueidis.NewLuaScriptRetryable(markerScript),
		markers: e.cfg.Quarantine,
		ownTTL:  e.cfg.MaxTTL.Milliseconds(),
		grace:   max(minRecordGrace, 10*e.cfg.QuarantineCheck),
		ctx:     ctx,
		cancel:  cancel,
	}
	var nonce [12]byte
	rand.Read(nonce[:])
	m.bootKey = bootNonceKey + hex.EncodeToString(nonce[:])
	m.boot.seen = make([]int8, e.n)
	m.boot.decided = !e.cfg.Bootstrap || !m.markers
	for i, addr := range e.cfg.Masters {
		// since starts now: a quarantine found by its first checks lifts
		// only after the others answered since (liftable), even before
		// its pipeline connects.
		m.watches = append(m.watches, &watch{m: m, i: i, addr: addr, kick: make(chan struct{}, 1), since: time.Now()})
		// Unverified until its first check: its status says so from the
		// start (a vote could not count anyway before the pipeline
		// connects, which sets this again).
		e.setQuarantine(i, time.Now().Add(e.cfg.MaxTTL), WhyUnverified)
	}
	return m
}

// onState wraps the pipelines' state callback: a (re)connected master does
// not vote until it has been checked on this connection's watch.
func (m *monitor) onState(next func(int, bool, error)) func(int, bool, error) {
	return func(i int, up bool, err error) {
		// Down or up again, the master may have restarted: its votes stop
		// counting until a check that starts after the reconnection
		// answers. Set on the way down too, so that no reply on the next
		// connection can count before OnState(up) runs.
		w := m.watches[i]
		l := m.quarantineLen()
		w.mu.Lock()
		w.state, w.since = unverified, time.Now()
		m.e.setQuarantine(i, time.Now().Add(l), WhyUnverified)
		if m.markers {
			// It ends on a check's "ok", not when l runs out: l is only
			// what this proxy knows of max_ttl, and the master's own
			// check may be slower than that (found by review).
			m.e.bar(i, barEnding)
		}
		if up {
			w.epoch++
		}
		w.mu.Unlock()
		if up {
			w.poke()
		}
		if next != nil {
			next(i, up, err)
		}
	}
}

func (m *monitor) start() {
	if !m.boot.decided {
		t := time.AfterFunc(bootstrapWait, m.bootstrapTimeout)
		m.stopBoot = t.Stop
	}
	for _, w := range m.watches {
		m.wg.Add(1)
		go w.run()
	}
}

func (m *monitor) stop() {
	if m.stopBoot != nil {
		m.stopBoot()
	}
	m.cancel()
	m.wg.Wait()
}

// quarantineLen is L: the longest max_ttl of this proxy and of every
// record read from any master.
func (m *monitor) quarantineLen() time.Duration {
	l := m.ownTTL
	for _, w := range m.watches {
		w.mu.Lock()
		l = max(l, w.recorded)
		w.mu.Unlock()
	}
	return time.Duration(l) * time.Millisecond
}

func (w *watch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run checks the master when kicked (reconnection, bootstrap decided) and
// periodically, until the monitor stops.
func (w *watch) run() {
	defer w.m.wg.Done()
	client, err := w.newClient()
	if err != nil {
		// Only a bad option gets here (ForceSingleClient returns a client
		// even when the master is down). The master then stays in its
		// provisional quarantine after every reconnection: safe, slow.
		w.m.e.cfg.Logger.Error("cannot build the master monitor's client; this master's votes will not count",
			"master", w.addr, "err", err)
		return
	}
	defer client.Close()
	var flush rueidis.Client
	if w.m.markers {
		if flush = w.newFlushWatch(); flush != nil {
			defer flush.Close()
		}
	}
	w.mu.Lock()
	w.client = client
	w.mu.Unlock()
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
		w.mu.Lock()
		w.staleness() // checks that hang count too
		w.mu.Unlock()
		next := w.check(client)
		w.keepFlushWatch(flush)
		timer.Reset(next)
	}
}

// check reads the master's eviction policy, then (quarantine on) runs the
// marker script, and applies the answers. It returns when to check next.
func (w *watch) check(client rueidis.Client) time.Duration {
	m := w.m
	interval := m.e.cfg.QuarantineCheck
	started := time.Now()
	w.mu.Lock()
	epoch := w.epoch
	w.mu.Unlock()
	taint, err := w.checkPolicy(client)
	if err == nil && m.markers {
		err = w.checkMarker(client, epoch, taint, started)
	} else if err == nil {
		w.verifiedWithoutMarker(epoch, started)
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
	if w.state == quarantined {
		// Look again when it ends, to mark the master "ok" and say so.
		return max(min(interval, time.Until(w.until)+time.Millisecond), time.Millisecond)
	}
	return interval
}

// checked records a successful check that started at started: the
// master's votes may count (for the grace) as far as checking goes.
// w.mu is held.
func (w *watch) checked(started time.Time) {
	w.lastErr = ""
	w.fresh = started
	w.m.e.unbar(w.i, barStale)
}

// staleness bars the master's votes when no check has succeeded for the
// grace (or ever): its eviction policy and, with the quarantine on, this
// proxy's max_ttl record on it are then unknown. w.mu is held.
func (w *watch) staleness() {
	if time.Since(w.fresh) > w.m.grace {
		w.m.e.setCheckErr(w.i, w.lastErr)
		w.m.e.bar(w.i, barStale)
	}
}

// verifiedWithoutMarker: with the restart quarantine off, a checked master
// votes unless it may have evicted keys within the last max_ttl.
func (w *watch) verifiedWithoutMarker(epoch uint64, started time.Time) {
	l := w.m.quarantineLen()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epoch != epoch {
		w.poke()
		return
	}
	w.checked(started)
	if until := w.policy.evictedAt.Add(l); !w.policy.evictedAt.IsZero() && time.Now().Before(until) {
		w.state, w.until, w.start = quarantined, until, w.policy.evictedAt
		w.m.e.setQuarantine(w.i, until, WhyEvicting)
		return
	}
	if w.state != verifiedOK {
		w.state = verifiedOK
		w.m.e.setQuarantine(w.i, time.Time{}, 0)
	}
	w.m.e.unbar(w.i, barEnding) // set only with markers
}

// failed records a check that got no answer. A master whose pipeline never
// broke since its last good check keeps its state: it cannot have
// restarted; but once no check has succeeded for the grace, its votes stop
// counting until one does.
func (w *watch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	repeated := w.lastErr == err.Error()
	w.lastErr = err.Error()
	w.staleness()
	if repeated {
		return
	}
	level := w.m.e.cfg.Logger.Warn
	if w.state != unverified && time.Since(w.fresh) < w.m.grace/2 {
		level = w.m.e.cfg.Logger.Debug // a blip: the next check will do
	}
	level("cannot check the master's lockproxy marker and eviction policy; retrying (its votes do not count while it is unchecked, after a reconnection or for longer than the record grace)",
		"master", w.addr, "db", MarkerDB, "grace", w.m.grace, "err", err)
}

// liftable reports whether master i's quarantine may lift: N-Q+1 of the
// other masters (all of them with 3 masters) answered a check that started
// after since. Every proxy's lock lives on Q masters, each of which holds
// that proxy's max_ttl record (its votes count only while it does); if the
// master that lost its data was one of them, Q-1 others hold it, and any
// N-Q+1 others include one. Lifting on older knowledge let a proxy with a
// short max_ttl end a restarted master's quarantine before it read the
// longer max_ttl another proxy had recorded on the other masters, and
// grant a lock that proxy's holder still held. A master that does not
// answer does not count: with 3 masters, one down for good keeps a
// restarted one out until it answers. It kicks the masters not answered
// since, so that the lift waits one check, not a check interval. No
// watch's lock is held.
func (m *monitor) liftable(i int, since time.Time) bool {
	n := len(m.watches)
	need := min(n-m.e.q+1, n-1)
	have := 0
	for j, w := range m.watches {
		if j == i {
			continue
		}
		w.mu.Lock()
		fresh := !w.answered.Before(since)
		w.mu.Unlock()
		if fresh {
			have++
		} else {
			w.poke()
		}
	}
	return have >= need
}

func (m *monitor) kickAll() {
	for _, w := range m.watches {
		w.poke()
	}
}

func msArg(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
