package quorum

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// A checked script reports, with its reply, what each master's copy of the
// lock looked like around it, read on the master itself:
//
//   - had: the lock key held the caller's token before the script ran. A
//     failed acquisition is then not undone there: it did not create that
//     copy, which may be the caller's own valid lock (a script that also
//     takes a lock its token already holds, redlock-rb's or bsm's with a
//     chosen token, a Redisson re-entry). Deleting it took a lock from its
//     holder inside its validity (review, helper-57).
//   - holds and pttl: after it ran, the key holds the caller's token, with
//     that PTTL. A yes counts only when it does, for at least the TTL
//     validity is accounted with, less the drift allowance. The analyzer
//     reads a script's replies off probes; a reply that only looks like a
//     yes (another holder's TTL in seconds, 1; its value, "1") or a branch
//     the probes never took (a shorter TTL for some argument) was counted
//     as a lock the master did not give (review, helper-58).
//   - at: the key's PEXPIRETIME after it ran. A granted extend's shorter
//     TTL is written later (shortenScript) only where the key still
//     expires then: any later write of it, from any proxy, moved it, and a
//     late shorten cut a renewal granted through another lockproxy
//     (review, helper-57).
//
// An acquire also never lowers the TTL of a copy the token held before it:
// a failed re-acquisition with a shorter TTL is no release either.

// checkLua defines lockproxy_holds(k, tok): whether key k holds token tok
// (nil: whether it exists), exactly, in the shapes lock libraries write:
// a string whose value is the token, or a JSON value whose whole string
// (a JSON string) or one of whose top-level object fields' string value is
// the token (cjson's escapes, such as a base64 token's '\/', decoded); a
// hash's field; a set's or sorted set's member. A token given as {p = s}
// is a prefix: the string value starts with s (bsm/redislock's value is
// its token followed by metadata; CheckToken); one given as {f = f, v = s}
// is a JSON object's field f holding s (the analyzer found the token
// there: a constant field's value, which every holder's copy carries, is
// then no one's token). A token found anywhere
// within a value, or as any hash value, let a client whose token was one
// character of another's UUID, or a Redisson count ("1"), pass for that
// lock's holder: the guards then left that lock to the script (review,
// helper-69). A JSON value over 4 KiB is not decoded (this runs several
// times per key and script): no lock value is that long.
const checkLua = `local function lockproxy_holds(k, tok)
  local t = redis.call("TYPE", k).ok
  if tok == nil then return t ~= "none" end
  if type(tok) == "table" and tok.f then
    if t ~= "string" then return false end
    local v = redis.call("GET", k)
    if #v > 4096 or not string.find(v, "^%s*{") then return false end
    local ok, d = pcall(cjson.decode, v)
    return ok and type(d) == "table" and d[tok.f] == tok.v
  end
  if type(tok) == "table" then
    if t ~= "string" or #tok.p == 0 then return false end
    return string.sub(redis.call("GET", k), 1, #tok.p) == tok.p
  end
  if t == "string" then
    local v = redis.call("GET", k)
    if v == tok then return true end
    if #v > 4096 or not string.find(v, "^%s*[{\"]") then return false end
    local ok, d = pcall(cjson.decode, v)
    if not ok then return false end
    if type(d) == "string" then return d == tok end
    if type(d) == "table" then
      for f, x in pairs(d) do
        if type(f) == "string" and x == tok then return true end
      end
    end
  elseif t == "hash" then
    return redis.call("HEXISTS", k, tok) == 1
  elseif t == "zset" then
    return redis.call("ZSCORE", k, tok) ~= false
  elseif t == "set" then
    return redis.call("SISMEMBER", k, tok) == 1
  end
  return false
end
`

// zsetGuardLua defines, after lockproxy_tok, what WrapGuard and WrapCheck
// guard a sorted set with: lockproxy_now() (ms, the master's TIME);
// lockproxy_others(k), sorted set k's unexpired members that are not the
// caller's, {member, score} each ({all = true} past 64; nil: none);
// lockproxy_zbad(k, z, at, at0), whether the script dropped or lowered one
// of z's members still unexpired, or left k expiring (at, PEXPIRETIME
// after; at0, before) before the latest of them (or than before).
const zsetGuardLua = `local function lockproxy_expiry(k)
  local at = redis.pcall("PEXPIRETIME", k)
  if type(at) ~= "number" then return nil end
  return at
end
local function lockproxy_now()
  -- Before any write: Redis 5 and 6 replicate a script that read TIME
  -- only as its effects.
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function lockproxy_others(k)
  local own = redis.call("ZSCORE", k, lockproxy_tok)
  own = own and tonumber(own)
  local r = redis.call("ZRANGEBYSCORE", k, "(" .. string.format("%d", lockproxy_now()), "+inf", "WITHSCORES", "LIMIT", 0, 65)
  if #r > 128 then return {all = true} end
  local z = {}
  for j = 1, #r, 2 do
    local sc = tonumber(r[j + 1])
    if r[j] ~= lockproxy_tok and sc ~= own then z[#z + 1] = {r[j], sc} end
  end
  if #z == 0 then return nil end
  return z
end
local function lockproxy_zbad(k, z, at, at0)
  local now, last, t, bad = lockproxy_now(), nil, redis.call("TYPE", k).ok, false
  for _, m in ipairs(z) do
    if m[2] > now then
      local sc = t == "zset" and redis.call("ZSCORE", k, m[1])
      if not sc or tonumber(sc) < m[2] then bad = true end
      if not last or m[2] > last then last = m[2] end
    end
  end
  if last and at0 and at0 > 0 and at0 < last then last = at0 end
  if last and at and at >= 0 and at < last then bad = true end
  return bad
end
`

// Check says what WrapCheck checks around a script's body.
type Check struct {
	// Keys is a Lua expression for the list of lock keys ("KEYS" for
	// every KEYS); Token one for the caller's token ("nil": a tokenless
	// extend, whose copies are compared by digest instead).
	Keys, Token string
	// Keep: put back the TTL of a copy the token held before if the body
	// lowered it (acquires; an extend's body is wrapped by WrapNoShorten
	// already).
	Keep bool
	// Guard: a lock key another token held before the body, and that the
	// body took, changed, deleted or shortened, is put back as it was
	// (DUMP, RESTORE), and that master's vote is no yes: only a force
	// acquisition touches a lock another client holds, and a script
	// understood otherwise did so on a path the analyzer's probes did not
	// take (an argument's value or count, the key's name, the holder's
	// remaining TTL; review, helper-58).
	Guard bool
	// Tokenless (an acquire with Guard): Token is the constant every
	// acquisition of the lock writes, so a copy holding it before the body
	// is anyone's, not the caller's. It is guarded as another's (any
	// change to it, its expiry included, is put back), and that master's
	// vote is no yes whatever the body answered: a tokenless acquire whose
	// force band the probes never took re-set a held copy to the same
	// value, which the digest did not tell from untouched, and was granted
	// another client's lock (hunt, 2026-11-29).
	Tokenless bool
	// Aux, when set, is a Lua table of the KEYS indexes the body may write
	// besides the lock keys ("{}": none), as the analyzer saw the probes
	// write them. Every other KEYS entry that is no lock key is left as it
	// was: if the body changed it (its value, type or expiry; created or
	// deleted it), it is put back and that master's vote is no yes. An
	// acquire that deleted its second key, on a path the probes never
	// took, deleted whatever lock a client named there (hunt, 2026-11-29).
	// The entries in it may be written only as the probes' were: created,
	// a list changed, a counter with no expiry grown (auxLua).
	Aux string
	// capMS, when set, is a Lua expression of the most PTTL (ms) the
	// script may leave (CappedExtendScript's max_ttl): a bump that would
	// pass it moves the expiry 1 ms earlier instead, which the drift
	// allowance's 2 ms leave room for (and the next run that asks for the
	// cap sets it again).
	capMS string
}

// WrapCheck returns the script the masters run for a checked script:
// body, answering {reply, had, holds, pttl, at} (checkState), checked as
// c says.
//
// A sorted set is guarded by its members, as WrapGuard does
// (zsetGuardLua): another token's unexpired member dropped or lowered, or
// the key left expiring before it, is put back and that master votes no;
// expired members may go (a script that takes a set whose every member
// expired takes a free lock). Unguarded, Symfony save and
// putOffExpiration lookalikes with a force band the probes never took
// (under 30 s left) took another client's unexpired lock and were granted
// it (review, helper-83). Since an expired member may go, the caller's own
// member lives until its score: a sorted set's copy counts for the least
// of the key's PTTL and its member's score less the master's time, and not
// at all once that score has passed. Counted by the key's PTTL alone, an
// acquire scoring its member to expire in a second was granted for its
// whole TTL, and after that second another client's save took the lock
// (hunt, 2026-11-29). Lists and sets are not guarded.
//
// Every run that leaves the caller's token on a lock key moves that key's
// expiry (by 1 ms when nothing else did), so that the PEXPIRETIME an
// earlier granted extend reported no longer matches: its shorter TTL,
// landing late, must not cut a grant that kept the longer one (a re-take,
// an extend asking for less than the time left, one over several keys;
// reviews, helper-62, helper-63). So a lock re-taken or extended several
// times within one millisecond outlives its TTL by as many milliseconds:
// liveness only, no client's validity grows. A tokenless copy that was
// there before is not moved: that run votes no, so there is no grant to
// keep, and every contender's failed acquire moved the holder's expiry
// 1 ms later (at a thousand attempts a second, a crashed holder's lock
// never expired; hunt, helper-92).
func WrapCheck(body string, c Check) (string, error) {
	up := "at + 1"
	if c.capMS != "" {
		up = "((redis.call(\"PTTL\", lockproxy_keys[i]) + 1 > " + c.capMS + ") and at - 1 or at + 1)"
	}
	if strings.TrimSpace(c.Keys) == "" || strings.TrimSpace(c.Token) == "" {
		return "", fmt.Errorf("a checked script needs its lock keys and token")
	}
	restore, dump := "", ""
	if c.Keep {
		restore = keepLua
	}
	if c.Guard {
		dump, restore = guardDumpLua, restore+guardRestoreLua
	}
	tokenless := "false"
	if c.Tokenless && c.Guard {
		tokenless = "true"
	}
	auxHead, auxTail := "", ""
	if strings.TrimSpace(c.Aux) != "" {
		auxHead, auxTail = "local lockproxy_aux = lockproxy_auxdump("+c.Aux+")\n", "lockproxy_put = lockproxy_auxput(lockproxy_aux)\n"
	}
	return wrap2(body, checkLua+`local lockproxy_keys, lockproxy_tok, lockproxy_tokenless = `+c.Keys+`, `+c.Token+`, `+tokenless+`
local lockproxy_had, lockproxy_before, lockproxy_dump, lockproxy_any = {}, {}, {}, false
local lockproxy_z, lockproxy_zat0, lockproxy_put = {}, {}, false
`+zsetGuardLua+auxLua+`for i = 1, #lockproxy_keys do
  lockproxy_had[i] = lockproxy_holds(lockproxy_keys[i], lockproxy_tok)
  lockproxy_before[i] = redis.call("PTTL", lockproxy_keys[i])
  lockproxy_any = lockproxy_any or lockproxy_had[i]
`+dump+`end
local lockproxy_at0 = {}
for i = 1, #lockproxy_keys do
  lockproxy_at0[i] = redis.pcall("PEXPIRETIME", lockproxy_keys[i])
  if type(lockproxy_at0[i]) ~= "number" then lockproxy_at0[i] = -3 end
end
`+auxHead, `if lockproxy_reply == nil then lockproxy_reply = false end
`+auxTail+`local lockproxy_all, lockproxy_pttl = #lockproxy_keys > 0, -1
for i = 1, #lockproxy_keys do
  local k = lockproxy_keys[i]
`+restore+`  if lockproxy_put or not lockproxy_holds(k, lockproxy_tok) then lockproxy_all = false end
  local p = redis.call("PTTL", k)
  if type(lockproxy_tok) == "string" and redis.call("TYPE", k).ok == "zset" then
    local sc = redis.call("ZSCORE", k, lockproxy_tok)
    if sc then
      local left = tonumber(sc) - lockproxy_now()
      if left <= 0 then lockproxy_all, left = false, 0 end
      if p == -1 or left < p then p = left end
    end
  end
  if p ~= -1 and (lockproxy_pttl == -1 or p < lockproxy_pttl) then lockproxy_pttl = p end
end
local lockproxy_at = -3
for i = 1, #lockproxy_keys do
  local at = redis.pcall("PEXPIRETIME", lockproxy_keys[i])
  if type(at) ~= "number" then at = -3 end
  if at > 0 and at == lockproxy_at0[i] and not (lockproxy_tokenless and lockproxy_had[i]) and lockproxy_holds(lockproxy_keys[i], lockproxy_tok) then
    at = `+up+`
    redis.call("PEXPIREAT", lockproxy_keys[i], at)
  end
  if #lockproxy_keys == 1 then lockproxy_at = at end
end
return {lockproxy_reply, lockproxy_any and 1 or 0, lockproxy_all and 1 or 0, lockproxy_pttl, lockproxy_at}`)
}

// keepLua puts back the TTL of a copy the token held before the body, if
// the body lowered it. Not a tokenless one, which is anyone's: the guard
// puts it back exactly (and a PTTL read after the body can be a
// millisecond lower with nothing changed, Redis 7.0 not stopping the
// clock in a script, so every contender moved the holder's expiry).
const keepLua = `  if lockproxy_had[i] and not lockproxy_tokenless and lockproxy_before[i] > 0 and lockproxy_holds(k, lockproxy_tok) then
    local n = redis.call("PTTL", k)
    if n >= 0 and n < lockproxy_before[i] then redis.call("PEXPIRE", k, lockproxy_before[i]) end
  end
`

// guardDumpLua records, before the body, what Check.Guard puts back: a
// string or hash lock key that is another's (or, tokenless, anyone's),
// and a sorted set's other unexpired members.
const guardDumpLua = `  local t = redis.call("TYPE", lockproxy_keys[i]).ok
  if (not lockproxy_had[i] or lockproxy_tokenless) and (t == "string" or t == "hash") then
    lockproxy_dump[i], lockproxy_zat0[i] = redis.call("DUMP", lockproxy_keys[i]), lockproxy_expiry(lockproxy_keys[i])
  end
  if t == "zset" and type(lockproxy_tok) == "string" then
    lockproxy_z[i] = lockproxy_others(lockproxy_keys[i])
    if lockproxy_z[i] then
      lockproxy_dump[i], lockproxy_zat0[i] = redis.call("DUMP", lockproxy_keys[i]), lockproxy_expiry(lockproxy_keys[i])
    end
  end
`

// guardRestoreLua puts back, after the body, what guardDumpLua recorded
// if the body took, changed or shortened it, and a tokenless copy that
// was there before votes no.
const guardRestoreLua = `  local z = lockproxy_z[i]
  if z then
    if z.all and redis.call("DUMP", k) ~= lockproxy_dump[i] or not z.all and lockproxy_zbad(k, z, lockproxy_expiry(k), lockproxy_zat0[i]) then
      redis.call("RESTORE", k, math.max(lockproxy_before[i], 0), lockproxy_dump[i], "REPLACE")
      lockproxy_put = true
    end
  elseif lockproxy_dump[i] and lockproxy_tokenless and lockproxy_had[i] then
    if redis.call("DUMP", k) ~= lockproxy_dump[i] or lockproxy_expiry(k) ~= lockproxy_zat0[i] then
      redis.call("RESTORE", k, math.max(lockproxy_before[i], 0), lockproxy_dump[i], "REPLACE")
    end
  elseif lockproxy_dump[i] and (lockproxy_holds(k, lockproxy_tok) or redis.call("DUMP", k) ~= lockproxy_dump[i] or
      (lockproxy_before[i] > 0 and redis.call("PTTL", k) < lockproxy_before[i])) then
    redis.call("RESTORE", k, math.max(lockproxy_before[i], 0), lockproxy_dump[i], "REPLACE")
  end
  if lockproxy_tokenless and lockproxy_had[i] then lockproxy_all = false end
`

// auxLua defines lockproxy_auxdump(w), what each KEYS entry that is no
// lock key holds before the body, and lockproxy_auxput(a), which puts
// back every one the body changed and says whether there was one
// (Check.Aux). An entry whose index is not in w must be left as it was
// ({key, DUMP, PEXPIRETIME}). One in w, a key some probe wrote, may be
// written only as such keys are: created where there was none, a list
// changed (a signal list), a counter with no expiry grown (a fencing
// counter); anything else there before (a string, a counter with an
// expiry, a hash, a set, a sorted set: a lock's shapes, and every lock key
// has a TTL) must be left as it was too. Left to the body whatever it
// held, an acquire that cleared its signal key deleted whatever lock a
// client named there, and the next acquire of that lock was granted
// (hunt, helper-92). An entry read as a counter is {key, DUMP,
// PEXPIRETIME, n = its value}.
const auxLua = `local function lockproxy_int(k)
  if redis.call("TYPE", k).ok ~= "string" or redis.call("PTTL", k) ~= -1 then return nil end
  local v = redis.call("GET", k)
  if #v > 18 or not string.find(v, "^%-?%d+$") then return nil end
  return tonumber(v)
end
local function lockproxy_auxdump(w)
  local a, lock = {}, {}
  for i = 1, #lockproxy_keys do lock[lockproxy_keys[i]] = true end
  for j = 1, #KEYS do
    local k = KEYS[j]
    if not lock[k] then
      local t = w[j] and redis.call("TYPE", k).ok
      if not w[j] then
        a[#a + 1] = {k, redis.call("DUMP", k), lockproxy_expiry(k)}
      elseif t ~= "none" and t ~= "list" then
        a[#a + 1] = {k, redis.call("DUMP", k), lockproxy_expiry(k), n = lockproxy_int(k)}
      end
    end
  end
  return a
end
local function lockproxy_auxput(a)
  local put = lockproxy_put
  for _, x in ipairs(a) do
    local k, ok = x[1], false
    if x.n then
      local n = lockproxy_int(k)
      ok = n ~= nil and n >= x.n
    else
      ok = redis.call("DUMP", k) == x[2] and lockproxy_expiry(k) == x[3]
    end
    if not ok then
      if x[2] then
        redis.call("RESTORE", k, (x[3] and x[3] > 0) and x[3] or 0, x[2], "REPLACE", "ABSTTL")
      else
        redis.call("DEL", k)
      end
      put = true
    end
  end
  return put
end
`

// WrapGuard returns the script the masters run for a release or read
// with a token: body, with a lock key that another token held before it
// and that it changed, deleted or shortened put back as it was (DUMP,
// RESTORE), and then an error for reply, so that master's vote is no yes.
// Releasing or reading changes no lock the caller does not hold; a script
// understood as one did so on a path the analyzer's probes did not take
// (an argument's value with the holder's remaining TTL in some band;
// review, helper-68). Otherwise the reply is the body's own.
//
// A string or hash is another's when it does not hold the caller's token
// (lockproxy_holds). A sorted set's members carry their own expiry as
// their score (Symfony's RedisStore: ms on the master's clock, TIME), so
// dropping expired members is what its delete and exists do, and is
// allowed; what is guarded is each unexpired member other than the
// caller's token: after the script it is still there with no lower score,
// and the key expires no earlier than the latest of them (or than before).
// A member scored exactly as the caller's token is the caller's too
// (Symfony's __write__, written with it). Expired means at or before the
// master's TIME after the script, which is no earlier than any the script
// read. A sorted set with more than 64 unexpired members is no lock shape:
// any change to it is put back. Unguarded, a release whose force branch
// the probes never took deleted another client's unexpired Symfony lock
// (review, helper-69).
func WrapGuard(body, keys, token string) (string, error) {
	if strings.TrimSpace(keys) == "" || strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("a guarded script needs its lock keys and token")
	}
	return wrap2(body, checkLua+`local lockproxy_keys, lockproxy_tok = `+keys+`, `+token+`
local lockproxy_dump, lockproxy_before, lockproxy_at0, lockproxy_z = {}, {}, {}, {}
`+zsetGuardLua+`for i = 1, #lockproxy_keys do
  local k = lockproxy_keys[i]
  local t = redis.call("TYPE", k).ok
  if t == "zset" and type(lockproxy_tok) == "string" then
    lockproxy_z[i] = lockproxy_others(k)
  end
  if lockproxy_z[i] or ((t == "string" or t == "hash") and not lockproxy_holds(k, lockproxy_tok)) then
    lockproxy_dump[i], lockproxy_before[i] = redis.call("DUMP", k), redis.call("PTTL", k)
    lockproxy_at0[i] = lockproxy_expiry(k)
  end
end
`, `local lockproxy_put = nil
for i = 1, #lockproxy_keys do
  local k = lockproxy_keys[i]
  local z = lockproxy_z[i]
  if lockproxy_dump[i] then
    local at, at0 = lockproxy_expiry(k), lockproxy_at0[i]
    local bad = false
    if z and not z.all then
      bad = lockproxy_zbad(k, z, at, at0)
    else
      -- The expiry is compared as PEXPIREAT: Redis 7.0 does not stop the
      -- clock inside a script, so a PTTL read after the body can be lower
      -- with nothing changed.
      bad = redis.call("DUMP", k) ~= lockproxy_dump[i] or (at0 and at and (at0 == -1 and at ~= -1 or at0 > 0 and (at < at0 and at ~= -1)))
    end
    if bad then
      redis.call("RESTORE", k, math.max(lockproxy_before[i], 0), lockproxy_dump[i], "REPLACE")
      lockproxy_put = k
    end
  end
end
if lockproxy_put then
  return redis.error_reply("ERR lockproxy: this script changed the lock " .. lockproxy_put .. ", which another client holds; it was put back (a release or read must leave another holder's lock alone)")
end
return lockproxy_reply`)
}

// wrap2 runs head, then body as a function whose reply is lockproxy_reply,
// then tail. A shebang line stays first.
func wrap2(body, head, tail string) (string, error) {
	shebang := ""
	if strings.HasPrefix(body, "#!") {
		nl := strings.IndexByte(body, '\n')
		if nl < 0 {
			return "", fmt.Errorf("a script that is only a shebang line")
		}
		shebang, body = body[:nl+1], body[nl+1:]
	}
	return shebang + head + "local lockproxy_reply = (function()\n" + body + "\nend)()\n" + tail, nil
}

// checkState is what a checked request's masters reported (WrapCheck).
type checkState struct {
	seen  uint16 // masters whose reply had the checked shape
	had   uint16 // the token was there before
	holds uint16 // the token is there after
	// shortened: masters sent a granted extend's shorter TTL; gen: the
	// key's slot's write count at the grant (shorten.go)
	shortened uint16
	gen       uint64
	pttl      [MaxMasters]int64
	at        [MaxMasters]int64 // PEXPIRETIME after; <= 0: unknown
	minPTTL   int64             // a yes needs at least this PTTL (ms); 0: no minimum
}

// newCheck is the check of a request that accounts validity for ttl
// (0: none); checkTTL says a yes needs a copy whose PTTL outlasts the
// validity: ttl less the drift allowance. For a relative TTL the master
// sets exactly ttl; for an absolute expiry it is ttl less the time since
// the command arrived, and less the master's clock offset ahead of
// lockproxy's, which is what the check catches.
func newCheck(ttl time.Duration, driftFactor float64, checkTTL bool) *checkState {
	c := &checkState{}
	if checkTTL && ttl > 0 {
		c.minPTTL = max((ttl - Drift(ttl, driftFactor)).Milliseconds(), 1)
	}
	return c
}

// unwrapCheck takes the check's fields off master's reply and leaves the
// script's own reply. A reply of another shape (the script raised an
// error) checks nothing: no yes, and the undo as without the check.
// r.mu is held.
func (r *Request) unwrapCheck(master int, rep *resp.Reply) {
	c, bit := r.chk, uint16(1)<<master
	c.seen &^= bit
	c.had &^= bit
	c.holds &^= bit
	if rep.Type != resp.Array || len(rep.Elems) != 5 {
		return
	}
	for _, e := range rep.Elems[1:] {
		if e.Type != resp.Integer {
			return
		}
	}
	c.seen |= bit
	if rep.Elems[1].Int == 1 {
		c.had |= bit
	}
	if rep.Elems[2].Int == 1 {
		c.holds |= bit
	}
	c.pttl[master], c.at[master] = rep.Elems[3].Int, rep.Elems[4].Int
	*rep = rep.Elems[0]
}

// isYes is master's reply a yes vote: by the rule, and for a checked
// request only where the master's copy holds the token for long enough.
// r.mu is held.
func (r *Request) isYes(master int) bool {
	if !r.rule.IsYes(&r.replies[master], r.nkeys) {
		return false
	}
	c := r.chk
	if c == nil {
		return true
	}
	bit := uint16(1) << master
	if c.seen&bit == 0 || c.holds&bit == 0 {
		return false
	}
	if c.minPTTL == 0 || c.pttl[master] == -1 || c.pttl[master] >= c.minPTTL {
		return true
	}
	r.e.shortCopy(master, r, c.pttl[master])
	return false
}

// shortCopy warns, at most once a minute per master, that master's copy
// of a lock it holds for the caller expires before the validity lockproxy
// would grant: its vote is a no. With an absolute expiry (PXAT,
// PEXPIREAT) the likely cause is the master's clock running ahead of
// lockproxy's; with a relative one, a script setting another TTL than the
// one it was given.
func (e *Engine) shortCopy(master int, r *Request, pttl int64) {
	now := time.Now().UnixMilli()
	last := e.shortLogged[master].Load()
	if now-last < 60_000 || !e.shortLogged[master].CompareAndSwap(last, now) {
		return
	}
	e.cfg.Logger.Warn("master's copy of a lock expires before the validity lockproxy would grant, so its vote counts as no; "+
		"with an absolute expiry (PXAT, PEXPIREAT) this master's clock is ahead of lockproxy's, or it ran the command late, by about the shortfall plus the drift allowance: synchronise the clocks (NTP), check the master's latency; "+
		"otherwise the script set a shorter TTL than the one it was given, or scored the caller's sorted-set member to expire sooner (logged at most once a minute per master)",
		"master", e.cfg.Masters[master], "key", r.Key, "pttl_ms", pttl, "needed_ms", r.chk.minPTTL, "shortfall_ms", r.chk.minPTTL-pttl)
}

// created reports whether a failed acquisition's part on master i is its
// own to undo: it wrote there (applied), and, checked, the token was not
// there before it. A hash count is taken back by one whoever created the
// field. r.mu is held.
func (r *Request) created(i int) bool {
	if !r.applied(i) {
		return false
	}
	return r.chk == nil || r.undoOp == UndoHashDecr || r.chk.had&(1<<i) == 0
}
