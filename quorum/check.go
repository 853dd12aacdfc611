package quorum

import (
	"fmt"
	"strings"
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
