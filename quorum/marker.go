package quorum

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// markerScript checks and maintains the marker and the max_ttl record
// atomically. KEYS[1] is the marker, KEYS[2] the max_ttl record, KEYS[3]
// the counters' repair record (RepairKey: every quarantine's start is
// recorded there as pending until lockproxy restored the master's counters,
// repair.go); ARGV[1] is
// L, the quarantine length in ms (the longest max_ttl this proxy knows of),
// ARGV[2] the mode: "peek" (never write), "bootstrap" (create a missing
// marker as "ok"), "check" (create it as a quarantine); ARGV[3] this
// proxy's max_ttl in ms, ARGV[4] the record grace in ms, ARGV[5] "1" when
// the master was seen with an evicting policy (start a quarantine now),
// ARGV[6] "0" when a quarantine that has run out must not end yet (this
// proxy has not checked every other master since the master stopped
// voting: liftable), ARGV[7] how long the peek's nonce lives, in ms.
// KEYS[4] is this proxy's bootstrap nonce (bootNonceKey): a peek writes
// it, and bootstrap mode creates a missing marker as "ok" only while it is
// there. Without it, the master lost its data after this proxy's peek
// found it blank (a restart during the bootstrap, after other proxies had
// checked it and granted locks on it): it is quarantined like any master
// found without a marker.
// KEYS[5] is SeenKey: what the last check saw of the master's process
// (keyspaceScript); a master that lost or replaced keys by an operator's
// command since, or restarted from a copy of its data that may be older
// than its last writes, is quarantined from now, as with ARGV[5]. ARGV[8]
// is "1" when the check read that the master persists every write
// (policyState.durable).
// It returns {master_now_ms, state, end_ms, start_ms, recorded_ms, repair,
// cause}: state "none" (peek only), "ok", "new" (quarantine just started)
// or "quarantined"; recorded is the longest max_ttl recorded on this
// master; repair the repair record ("" when none); cause the command that
// started the quarantine ("" when none or not one; "noinfo" when INFO is
// refused).
const markerScript = keyspaceScript + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local L = tonumber(ARGV[1])
local write = ARGV[2] ~= 'peek'
local lift = ARGV[6] ~= '0'
local recorded = 0
if write then
  local keep = now + tonumber(ARGV[3]) + tonumber(ARGV[4])
  local cur = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[3]))
  if not cur or cur < keep then redis.call('ZADD', KEYS[2], keep, ARGV[3]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local v = tonumber(m)
    if v and v > recorded then recorded = v end
  end
  if recorded > L then L = recorded end
end
local function lost(s)
  local r = redis.call('GET', KEYS[3])
  local rs = r and tonumber(string.match(r, '^%a:(%d+)$'))
  if not rs or rs < s then redis.call('SET', KEYS[3], string.format('p:%d', s)) end
end
local function quarantine(s, e)
  redis.call('SET', KEYS[1], string.format('q:%d:%d', s, e))
  lost(s)
end
local cause, seen = '', nil
local function out(state, e, s)
  return {now, state, e, s, recorded, redis.call('GET', KEYS[3]) or '', cause}
end
local v = redis.call('GET', KEYS[1])
if write then cause, seen = keyspace_cause(v, ARGV[2] == 'bootstrap') end
local start, till
if v and string.sub(v, 1, 2) == 'q:' then
  local s, e = string.match(v, '^q:(%d+):(%d+)$')
  start, till = tonumber(s), tonumber(e)
  if write and start then lost(start) end
elseif v and v ~= 'ok' then
  -- A quarantine end written by an older lockproxy, which recorded no
  -- start: count it from now (longer, never shorter), and rewrite it.
  till = tonumber(v)
  if till then
    start = now
    if write then
      if start + L > till then till = start + L end
      quarantine(start, till)
    end
  end
end
if write and (ARGV[5] == '1' or (cause ~= '' and cause ~= 'noinfo')) then
  local e = now + L
  if till and till > e then e = till end
  quarantine(now, e)
  redis.call('HSET', KEYS[5], unpack(seen))
  return out('new', e, now)
end
if seen then redis.call('HSET', KEYS[5], unpack(seen)) end
if v == 'ok' then return out('ok', 0, 0) end
if start and till then
  if start + L > till then
    till = start + L
    if write then quarantine(start, till) end
  end
  if till <= now and lift then
    if write then redis.call('SET', KEYS[1], 'ok') end
    return out('ok', 0, 0)
  end
  return out('quarantined', till, start)
end
if not write then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[7])
  return out('none', 0, 0)
end
if ARGV[2] == 'bootstrap' and not v and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('SET', KEYS[1], 'ok')
  return out('ok', 0, 0)
end
quarantine(now, now + L)
return out('new', now + L, now)
`

// recordSlack lengthens a max_ttl record's life past the grace: a master
// is barred as stale only when a check starts or fails, up to two check
// timeouts and a retry after the grace ran out, and a lock it voted for
// meanwhile must not outlive the record (found by review).
const recordSlack = 2*checkTimeout + 250*time.Millisecond

// markerReply is the marker script's answer.
type markerReply struct {
	now, end, start, recorded int64 // ms, master clock
	state                     string
	repair                    string // the repair record: "p:<start>" pending, "d:<start>" done, "" none
	cause                     string // the operator's command that started the quarantine (keyspaceScript)
}

// checkMarker runs the marker script and applies its answer. A taint
// (the master may have evicted keys) stays pending until a run that wrote
// it succeeded.
func (w *watch) checkMarker(client rueidis.Client, epoch uint64, taint bool, started time.Time) error {
	m := w.m
	w.mu.Lock()
	mode := "check"
	if !w.booted {
		switch decided, use := m.boot.result(); {
		case !decided:
			mode = "peek"
		case use:
			mode = "bootstrap"
		}
	}
	since := w.since
	durableArg := "0"
	if w.policy.durable {
		durableArg = "1"
	}
	w.mu.Unlock()
	taintArg := "0"
	if taint {
		taintArg = "1"
	}
	lift := m.liftable(w.i, since)
	liftArg := "1"
	if !lift {
		liftArg = "0"
	}
	ctx, cancel := context.WithTimeout(m.ctx, checkTimeout)
	if h := onMarker.Load(); h != nil {
		(*h)(m.e, w.i, mode)
	}
	res, err := m.script.Exec(ctx, client, []string{MarkerKey, MaxTTLKey, RepairKey, m.bootKey, SeenKey},
		[]string{msArg(m.quarantineLen()), mode, strconv.FormatInt(m.ownTTL, 10), msArg(m.grace + recordSlack), taintArg, liftArg, msArg(bootNonceTTL), durableArg}).ToArray()
	cancel()
	received := time.Now()
	var rep markerReply
	if err == nil {
		rep, err = parseMarkerReply(res)
	}
	if err != nil {
		return err
	}
	if w.recordedAnswer(rep, mode) {
		m.relearn()
	}
	l := m.quarantineLen() // may have grown since the script ran
	w.mu.Lock()
	defer w.mu.Unlock()
	if rep.cause == "noinfo" {
		w.noInfo()
		rep.cause = ""
	}
	if mode != "peek" {
		w.answered = started // its max_ttl records are read (liftable)
	}
	if taint && mode != "peek" {
		w.policy.taintPending = false // written (applyMarker may ask again)
	}
	if w.epoch != epoch {
		// The pipeline reconnected while we asked: this answer may be
		// about another process. Ask again. The reconnection's own
		// quarantine keeps its votes out meanwhile.
		w.lifted(mode, taint, started)
		w.poke()
		return nil
	}
	if mode == "peek" {
		if rep.state == "none" {
			// Blank master: wait for the bootstrap decision (it kicks us).
			if until, q := m.e.QuarantinedUntil(w.i); q {
				m.e.setQuarantine(w.i, until, WhyBootstrap)
			}
			m.vote(w.i, false)
			return nil
		}
		m.vote(w.i, true)
	}
	if mode == "bootstrap" || m.boot.isDecided() {
		w.booted = true
	}
	// The answer's quarantine first, then what the check lifts: the other
	// way round, a master found blank after its provisional quarantine
	// ran out (bootstrap waited longer than max_ttl) voted between the
	// two.
	w.applyMarker(rep, received, l, lift)
	w.lifted(mode, taint, started)
	if h := onChecked.Load(); h != nil {
		(*h)(m.e, w.i)
	}
	return nil
}

// lifted records what a check that answered lifts: the bar of an evicting
// policy once the taint is written, and the bar of a stale check. w.mu is
// held; called after the answer's quarantine is applied.
func (w *watch) lifted(mode string, taint bool, started time.Time) {
	if mode == "peek" {
		return
	}
	if taint && w.policy.policy == "noeviction" {
		w.m.e.unbar(w.i, barEvicting)
	}
	w.checked(started)
}

// onMarker, when set by a test, sees each check just before its marker
// script runs, with no lock held.
var onMarker atomic.Pointer[func(e *Engine, master int, mode string)]

// onChecked, when set by a test, sees each check once its answer is
// applied (checkMarker), with the check's w.mu held.
var onChecked atomic.Pointer[func(e *Engine, master int)]

// recordedAnswer notes this master's record of max_ttl. It reports
// whether the master recorded a longer max_ttl than was known before.
func (w *watch) recordedAnswer(rep markerReply, mode string) (longer bool) {
	if mode == "peek" {
		return false
	}
	before := w.m.quarantineLen().Milliseconds()
	w.mu.Lock()
	w.recorded = rep.recorded
	w.mu.Unlock()
	return rep.recorded > before
}

// applyMarker sets the master's quarantine from the marker, extended to
// start+l where l, the longest max_ttl known now, exceeds what the script
// was given (the marker follows at the next check). A quarantine that has
// run out stays while it may not lift (liftable), until a check shortly
// after. w.mu is held.
func (w *watch) applyMarker(rep markerReply, received time.Time, l time.Duration, lift bool) {
	m := w.m
	w.repairState(rep.repair) // before the quarantine may lift
	if rep.state == "ok" && !w.policy.evictedAt.IsZero() && time.Since(w.policy.evictedAt) < l {
		// This proxy saw it evicting within max_ttl, yet the marker says
		// "ok" (the taint's write was lost): quarantine it from then, and
		// write the taint again.
		rep.state, rep.start, rep.end = "quarantined", rep.now-time.Since(w.policy.evictedAt).Milliseconds(), 0
		w.policy.taintPending = true
		w.poke()
	}
	switch rep.state {
	case "ok":
		m.e.unbar(w.i, barEnding)
		if w.state != verifiedOK {
			if !w.logged.IsZero() {
				m.e.cfg.Logger.Info("master quarantine ended: its votes count again", "master", w.addr)
				w.logged = time.Time{}
			}
			w.state = verifiedOK
			m.e.setQuarantine(w.i, time.Time{}, 0)
		}
	case "new", "quarantined":
		until := received.Add(time.Duration(rep.end-rep.now) * time.Millisecond)
		start := received.Add(time.Duration(rep.start-rep.now) * time.Millisecond)
		if start.Add(l).After(until) {
			until = start.Add(l)
			w.poke() // write the longer end into the marker
		}
		if w.state == quarantined && absDuration(w.start.Sub(start)) < 5*time.Millisecond && w.until.After(until) {
			until = w.until // never shorten a quarantine relearn extended
		}
		why := WhyRestarted
		if w.policy.evictedAt.After(start.Add(-time.Second)) {
			why = WhyEvicting
		}
		// Logged once per quarantine: a reconnection during it (which
		// checks again) or this proxy's clock reading the same end again
		// is no news, nor is the end a policy that still evicts moves at
		// each check (its error said so, once); the end it has once the
		// policy is noeviction again is.
		evicting := w.policy.policy != "" && w.policy.policy != "noeviction"
		if w.logged.IsZero() || !evicting && absDuration(until.Sub(w.logged)) > 100*time.Millisecond {
			w.logged = until
			msg := "master quarantined: its lockproxy marker says it lost its data earlier, or may have evicted keys (noticed by this or another lockproxy); its votes do not count until the quarantine ends"
			switch {
			case why == WhyEvicting:
				msg = "master quarantined: it may have evicted lock keys (maxmemory-policy not noeviction); its votes do not count until the longest lock it may have lost has expired"
			case rep.cause != "":
				msg = keyspaceCauseMsg(rep.cause)
			case rep.state == "new":
				msg = "master quarantined: it carries no lockproxy marker: it restarted without its data, its database 1 was emptied (FLUSHALL, FLUSHDB or SWAPDB there), or it is new; its votes do not count until the longest lock it may have lost has expired"
			}
			m.e.cfg.Logger.Warn(msg, "master", w.addr, "until", until.UTC().Format(time.RFC3339Nano), "length", time.Duration(rep.end-rep.start)*time.Millisecond)
		}
		if recheck := received.Add(min(m.e.cfg.QuarantineCheck, 250*time.Millisecond)); !lift && until.Before(recheck) {
			until = recheck // the other masters were kicked (liftable)
		}
		if w.state == verifiedOK || rep.state == "new" || start.Sub(w.start) > 5*time.Millisecond {
			w.since = received // it stopped voting, or lost its data again
		}
		w.state, w.until, w.start = quarantined, until, start
		m.e.setQuarantine(w.i, until, why)
		m.e.bar(w.i, barEnding)
	}
}

// relearn extends running quarantines at once when a longer max_ttl was
// learned: the marker on their master is extended at its next check, but
// their votes must not count before.
func (m *monitor) relearn() {
	l := m.quarantineLen()
	for _, w := range m.watches {
		w.mu.Lock()
		if w.state == quarantined && w.start.Add(l).After(w.until) {
			w.until = w.start.Add(l)
			why, _ := m.e.quarantineWhy(w.i)
			m.e.setQuarantine(w.i, w.until, why)
			w.poke()
		}
		w.mu.Unlock()
	}
}
