package quorum

// Keyspace loss without a restart. An operator's FLUSHDB, SWAPDB,
// REPLICAOF (a full sync replaces every database with the primary's, whose
// marker may say "ok") or FAILOVER empties or replaces a master's keys
// while its process, and lockproxy's connections to it, live on: neither
// the marker (database 1 survives a FLUSHDB of database 0, and comes back
// "ok" from a lockproxy primary) nor a broken pipeline shows it. What does
// is the master's own account of itself, read by the marker script in the
// same atomic run (keyspaceScript): INFO commandstats counts every call of
// those commands, INFO replication says whether it is or was a replica
// since it started (role, master_replid2), INFO server names the process
// (run_id). Each check compares them with what the last check recorded on
// the master (SeenKey, database 1, so every proxy and a restarted one see
// the same record) and records them again. A master that ran any of them
// since, or is a replica, is quarantined from now for L, as one found
// without a marker: a lock it lost was granted before the command, so it
// has expired by the end. CONFIG RESETSTAT, which would hide the counts,
// is itself counted (config|resetstat), and the count of TIME (every check
// calls it) falling back shows a reset too.
//
// A record of another process, or none (an upgrade from a lockproxy that
// kept none), says nothing about this one's counts: the master is
// quarantined if this process was a replica since it started (REPLICAOF,
// SLAVEOF or FAILOVER counted, or a master_replid2), unless in bootstrap
// mode (a new deployment). A record of another process also means this
// one restarted and loaded the data from disk (a full sync's copy shows
// as a replica): an RDB snapshot, or an AOF fsynced every second, may
// predate locks the old process granted, and such a master lost them as
// an empty one did. It is quarantined unless the old process (its record)
// and this one (CONFIG GET, policyState.durable) persist every write
// before answering it: appendonly yes, appendfsync always,
// no-appendfsync-on-rewrite no. The other counts are only recorded: they
// may be from before the first check of a lockproxy that records them (an
// upgrade), and masters flushed once at set-up, or whose statistics a
// monitoring tool resets, would all be quarantined at once, for max_ttl,
// by the upgrade.
//
// The flush watch shortens the wait for flushes: a connection with
// CLIENT TRACKING on (OPTIN: no key is tracked), on which the master
// pushes a null invalidation the moment a FLUSHDB or FLUSHALL of any
// database runs, or a full sync empties it. Its votes then stop counting
// at once, as after a reconnection, until a check that starts after the
// push answers (and quarantines it). The push travels on its own
// connection, not in order with the votes: a vote the master answered
// after the flush can still reach lockproxy first, while the push is read
// and applied (docs/operations.md has the race measured).
//
// What this cannot close: without the push (SWAPDB, REPLICAOF NO ONE,
// DEBUG, a flush while the watch's connection was down), the master votes
// from the command until the next check that starts after it
// (quorum.quarantine_check, 500ms by default, plus one round trip; up to
// the record grace while checks fail). docs/operations.md says what
// operators must not do.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// SeenKey (database MarkerDB) records what the last check saw of the
// master's process: its run_id, master_replid2, and the call counts of the
// commands in keyspaceScript.
const SeenKey = "lockproxy:seen"

// keyspaceScript defines keyspace_cause(v, bootstrap), run by the marker
// script with write access: it returns the command by which the master may
// have lost or replaced keys since the last check ("" when none), and the
// record of what it saw, for HSET into KEYS[5] (SeenKey) once any
// quarantine it causes is written. v is the marker before this check. A
// master that refuses INFO to scripts (a managed Redis) cannot be checked:
// "noinfo", no record; lockproxy says so once (noInfo).
const keyspaceScript = `
local watched = {'flushdb', 'flushall', 'swapdb', 'replicaof', 'slaveof', 'failover', 'debug', 'config|resetstat', 'time'}
-- field returns what follows name in an INFO answer, up to the line's end
-- (plain find: patterns over the whole answer cost several times INFO).
local function field(info, name)
  local i = string.find(info, name, 1, true)
  if not i then return '' end
  return string.match(info, '^[^\r\n]*', i + #name)
end
local function keyspace_cause(v, bootstrap)
  local srv, rep, cs = redis.pcall('INFO', 'server'), redis.pcall('INFO', 'replication'), redis.pcall('INFO', 'commandstats')
  if type(srv) ~= 'string' or type(rep) ~= 'string' or type(cs) ~= 'string' then
    return 'noinfo', nil
  end
  local run = field(srv, '\nrun_id:')
  local role = field(rep, '\nrole:')
  local replid2 = field(rep, '\nmaster_replid2:')
  local cur = {}
  for _, c in ipairs(watched) do
    cur[c] = tonumber(string.match(field(cs, 'cmdstat_' .. c .. ':calls='), '^%d+')) or 0
  end
  local function calls(c) return cur[c] end
  local seen = {}
  local flat = redis.call('HGETALL', KEYS[5])
  for i = 1, #flat, 2 do seen[flat[i]] = flat[i + 1] end
  local cause = ''
  if role ~= 'master' then
    cause = 'replicaof'
  elseif seen.run == run then
    if seen.replid2 ~= replid2 then cause = 'replicaof' end
    for _, c in ipairs(watched) do
      if cause == '' and c ~= 'time' and tonumber(seen[c]) ~= calls(c) then cause = c end
    end
    -- Every check calls TIME: a count that did not grow was reset.
    if cause == '' and calls('time') <= (tonumber(seen.time) or 0) then cause = 'config|resetstat' end
  elseif v and not bootstrap then
    for _, c in ipairs({'replicaof', 'slaveof', 'failover'}) do
      if cause == '' and calls(c) > 0 then cause = c end
    end
    if cause == '' and not string.match(replid2, '^0+$') then cause = 'replicaof' end
    -- A record of another process: this one restarted and loaded its data
    -- from disk, which holds every write only if the old process persisted
    -- each one before answering it (its record) and this one loaded them
    -- from that AOF. ARGV[8] may have been read from the old process, just
    -- before this script reached the new one; aof_enabled is this one's.
    if cause == '' and seen.run then
      local durable = seen.durable == '1' and ARGV[8] == '1'
      if durable then
        local p = redis.pcall('INFO', 'persistence')
        durable = type(p) == 'string' and field(p, '\naof_enabled:') == '1'
      end
      if not durable then cause = 'restart' end
    end
  end
  local rec = {'run', run, 'replid2', replid2, 'durable', ARGV[8]}
  for _, c in ipairs(watched) do
    rec[#rec + 1] = c
    rec[#rec + 1] = calls(c)
  end
  return cause, rec
end
`

// keyspaceCauseMsg is the warning for a master quarantined because of
// cause, a command keyspaceScript watches.
func keyspaceCauseMsg(cause string) string {
	switch cause {
	case "replicaof", "slaveof", "failover":
		return "master quarantined: it is or was a replica since it started (REPLICAOF, SLAVEOF or FAILOVER ran on it), so its keys were replaced by another server's; its votes do not count until the longest lock it may have lost has expired. Do not replicate into lockproxy's masters"
	case "restart":
		return "master quarantined: it restarted and reloaded its data from disk (an RDB snapshot, or an AOF without appendfsync always), which may be older than locks it granted; its votes do not count until the longest lock it may have lost has expired. Run masters without persistence, or with appendonly yes, appendfsync always and no-appendfsync-on-rewrite no"
	case "config|resetstat":
		return "master quarantined: CONFIG RESETSTAT ran on it, which hides whether FLUSHDB, SWAPDB or REPLICAOF ran too; its votes do not count until the longest lock it may have lost has expired. Do not reset the statistics of lockproxy's masters"
	}
	return "master quarantined: " + strings.ToUpper(cause) + " ran on it, so it may have lost lock keys without restarting; its votes do not count until the longest lock it may have lost has expired. Do not run FLUSHDB, FLUSHALL, SWAPDB or DEBUG on lockproxy's masters"
}

// noInfo logs, once per master, that its INFO cannot be read by the
// marker script, so a FLUSHDB, SWAPDB or REPLICAOF on it goes unnoticed.
// w.mu is held.
func (w *watch) noInfo() {
	if w.infoRefused {
		return
	}
	w.infoRefused = true
	w.m.e.cfg.Logger.Warn("the master refuses INFO inside scripts: lockproxy cannot notice a FLUSHDB, SWAPDB or REPLICAOF on it, nor a restart from an RDB snapshot or AOF, only a FLUSHALL or a restart without its data; allow INFO (server, replication, commandstats) to lockproxy's user",
		"master", w.addr)
}

// newFlushWatch opens the flush watch (see above), or returns nil.
func (w *watch) newFlushWatch() rueidis.Client {
	opt := w.clientOption()
	opt.ClientName = "lockproxy-flushwatch"
	opt.DisableCache = false
	opt.ClientTrackingOptions = []string{"OPTIN"}
	opt.OnInvalidations = func(keys []rueidis.RedisMessage) {
		if keys == nil { // a flush, not a key: OPTIN tracks none
			w.flushed()
		}
	}
	c, err := rueidis.NewClient(opt)
	if c == nil {
		w.m.e.cfg.Logger.Warn("cannot build the master's flush watch; a FLUSHDB or FLUSHALL on it is noticed at the next check instead",
			"master", w.addr, "err", err)
		return nil
	}
	return c
}

// flushed: the master pushed a flush. Its votes stop counting now, as
// after a reconnection, until a check that starts after this answers; the
// epoch makes a check already in flight ask again.
func (w *watch) flushed() {
	l := w.m.quarantineLen()
	w.mu.Lock()
	w.state, w.since = unverified, time.Now()
	w.epoch++
	w.m.e.setQuarantine(w.i, time.Now().Add(l), WhyUnverified)
	w.m.e.bar(w.i, barEnding)
	w.mu.Unlock()
	w.poke()
}

// flushBackoffMax bounds the pause between two dials of a flush watch the
// master refuses.
const flushBackoffMax = time.Minute

// keepFlushWatch sends a PING on the flush watch, so that rueidis redials
// it when it broke (it dials on use), without holding up the checks. A
// master that refuses the watch (CLIENT TRACKING or HELLO 3 denied by its
// ACL, or not supported) is asked again after a pause that doubles up to
// flushBackoffMax: redialled at every check, it took a connection, AUTH
// and an ACL log entry per check, for nothing.
func (w *watch) keepFlushWatch(c rueidis.Client) {
	if c == nil {
		return
	}
	w.mu.Lock()
	wait := time.Now().Before(w.flushRetry)
	w.mu.Unlock()
	if wait || !w.flushPing.CompareAndSwap(false, true) {
		return
	}
	w.m.wg.Add(1)
	go func() {
		defer w.m.wg.Done()
		defer w.flushPing.Store(false)
		ctx, cancel := context.WithTimeout(w.m.ctx, checkTimeout)
		err := c.Do(ctx, c.B().Ping().Build()).Error()
		cancel()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		refused := errors.Is(err, rueidis.ErrNoCache)
		w.mu.Lock()
		changed := msg != w.flushErr
		w.flushErr = msg
		if refused {
			w.flushBackoff = min(max(2*w.flushBackoff, time.Second), flushBackoffMax)
			w.flushRetry = time.Now().Add(w.flushBackoff)
		} else {
			w.flushBackoff, w.flushRetry = 0, time.Time{}
		}
		w.mu.Unlock()
		switch {
		case !changed || err == nil || w.m.ctx.Err() != nil:
		case refused:
			w.m.e.cfg.Logger.Warn("the master refuses lockproxy's flush watch (CLIENT TRACKING on a RESP3 connection); a FLUSHDB or FLUSHALL on it is noticed at the next check instead; allow HELLO and CLIENT TRACKING to lockproxy's user (retried with back-off, up to every minute)",
				"master", w.addr, "err", err)
		default:
			w.m.e.cfg.Logger.Info("the master's flush watch (CLIENT TRACKING) is not connected; a FLUSHDB or FLUSHALL on it is noticed at the next check instead; retrying",
				"master", w.addr, "err", err)
		}
	}()
}
