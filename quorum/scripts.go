package quorum

import (
	"slices"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Script is a Lua script lockproxy itself sends to masters (never one of a
// client's): the undo of failed acquisitions and the per-key reads.
type Script struct {
	Body string
	SHA1 string
}

func newScript(body string) Script {
	return Script{Body: body, SHA1: ScriptSHA1(body)}
}

// newCheckedScript is newScript of body wrapped by WrapCheck, leaving at
// most capMS of PTTL ("": no cap known).
func newCheckedScript(keys, token, capMS, body string) Script {
	b, err := WrapCheck(body, Check{Keys: keys, Token: token, Guard: true, capMS: capMS})
	if err != nil {
		panic(err)
	}
	return newScript(b)
}

var (
	// undoScript deletes each KEY whose value is ARGV[1]: the compensating
	// operation of every acquisition (SET NX and acquire scripts alike).
	undoScript = newScript(`local n = 0
for i = 1, #KEYS do
  if redis.call("GET", KEYS[i]) == ARGV[1] then n = n + redis.call("DEL", KEYS[i]) end
end
return n`)
	// getTTLScript returns the value and the PTTL of KEYS[1] in one round
	// trip, so PTTL can be counted over masters holding the same value. A
	// key of another type stands for its type, NUL first, and for a small
	// hash or sorted set (Redisson's and Symfony's locks) its sorted fields
	// or members too, the holder: so PTTL answers as on one Redis (GET
	// would raise WRONGTYPE, whose errors read as "no such key"), and never
	// counts one holder's copies with another's, which could answer a time
	// longer than any quorum holds either.
	getTTLScript = newScript(`local t = redis.call("TYPE", KEYS[1]).ok
if t == "none" then return {false, -2} end
if t == "string" then return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1])} end
local v, m = "\0" .. t, nil
if t == "hash" and redis.call("HLEN", KEYS[1]) <= 16 then
  m = redis.call("HKEYS", KEYS[1])
elseif t == "zset" and redis.call("ZCARD", KEYS[1]) <= 16 then
  m = redis.call("ZRANGE", KEYS[1], 0, -1)
end
if m then table.sort(m) v = v .. "\0" .. table.concat(m, "\0") end
return {v, redis.call("PTTL", KEYS[1])}`)
	// valuePTTLScript is the {GET, PTTL} read as one Redis runs it:
	// getTTLScript stands for a hash or sorted set by an internal value,
	// which a client reading the pair would take for the lock's value;
	// here such a key fails at GET (WRONGTYPE) on each master, and the
	// read answers that error, as the client's own script would.
	valuePTTLScript = newScript(`return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1])}`)
	// existsScript returns, per KEY, 1 when it exists.
	existsScript = newScript(`local r = {}
for i = 1, #KEYS do r[i] = redis.call("EXISTS", KEYS[i]) end
return r`)
	// CappedExtendScript is redis-py's extend (same KEYS, ARGV[1..3] and
	// replies) with the new TTL capped at ARGV[4], max_ttl in ms. redis-py's
	// additive extend (ARGV[3] == "0") adds ARGV[2] to the remaining PTTL:
	// repeated, it would grow a key past max_ttl, which the restart
	// quarantine relies on no key outliving. The proxy runs this in its
	// place; the cap never cuts below ARGV[2] (itself at most max_ttl), the
	// figure validity is accounted with. It never lowers the key's TTL: a
	// renewal that fails, or lands late, must not end a lock its holder
	// still holds (WrapNoShorten says why). Checked (WrapCheck).
	CappedExtendScript = newCheckedScript("{KEYS[1]}", "ARGV[1]", "tonumber(ARGV[4])", `local token = redis.call("GET", KEYS[1])
if not token or token ~= ARGV[1] then return 0 end
local expiration = redis.call("PTTL", KEYS[1])
if not expiration then expiration = 0 end
if expiration < 0 then return 0 end
local newttl = tonumber(ARGV[2])
if ARGV[3] == "0" then newttl = newttl + expiration end
if newttl > tonumber(ARGV[4]) then newttl = tonumber(ARGV[4]) end
if newttl > expiration then redis.call("PEXPIRE", KEYS[1], newttl) end
return 1`)
	// hashUndoScript takes back a re-entrant hash lock's acquisition: 1
	// from the token's count in each KEY, deleting the field at 0 and the
	// key when it is empty. Another holder's field is never touched.
	hashUndoScript = newScript(`local n = 0
for i = 1, #KEYS do
  if redis.call("TYPE", KEYS[i]).ok == "hash" and redis.call("HEXISTS", KEYS[i], ARGV[1]) == 1 then
    if redis.call("HINCRBY", KEYS[i], ARGV[1], -1) <= 0 then
      redis.call("HDEL", KEYS[i], ARGV[1])
      if redis.call("HLEN", KEYS[i]) == 0 then redis.call("DEL", KEYS[i]) end
    end
    n = n + 1
  end
end
return n`)
	// zremUndoScript takes back a sorted-set lock's acquisition: it removes
	// the members the attempt added (ARGV) from each KEY.
	zremUndoScript = newScript(`local n = 0
for i = 1, #KEYS do
  if redis.call("TYPE", KEYS[i]).ok == "zset" then
    n = n + redis.call("ZREM", KEYS[i], unpack(ARGV))
    if redis.call("ZCARD", KEYS[i]) == 0 then redis.call("DEL", KEYS[i]) end
  end
end
return n`)
	// jsonUndoScript deletes each KEY whose value, decoded as JSON, holds
	// ARGV[1] in field ARGV[2].
	jsonUndoScript = newScript(`local n = 0
for i = 1, #KEYS do
  local v = redis.call("GET", KEYS[i])
  if v then
    local ok, d = pcall(cjson.decode, v)
    if ok and type(d) == "table" and d[ARGV[2]] == ARGV[1] then n = n + redis.call("DEL", KEYS[i]) end
  end
end
return n`)
	// delScript deletes each KEY and returns, per KEY, 1 when it existed.
	delScript = newScript(`local r = {}
for i = 1, #KEYS do r[i] = redis.call("DEL", KEYS[i]) end
return r`)
	// extendScript is PEXPIRE KEYS[1] ARGV[1] of a key that has an expiry
	// already, else 0: every lock lockproxy writes has one, and a key
	// without one is a counter, which must not get one (it would start over
	// once expired, and a fencing token would go back). It never lowers
	// the TTL (WrapNoShorten says why). A yes carries a digest of the
	// value it extended ({1, lockproxy_digest}, digestLua): a PEXPIRE has no
	// token, and a quorum of extended copies counts only when they are
	// copies of one value (YesSameValue). Counting every copy let another
	// client's leftover or failed attempt on one master make up A's
	// quorum; once that copy was gone, A's extended lock stood on a
	// minority and a third client was granted it (review, helper-52).
	// Checked (WrapCheck), with no token: the digest compares copies.
	extendScript = newCheckedScript("{KEYS[1]}", "nil", "", digestLua+`local before = redis.call("PTTL", KEYS[1])
if before < 0 then return 0 end
if tonumber(ARGV[1]) > before then redis.call("PEXPIRE", KEYS[1], ARGV[1]) end
return {1, lockproxy_digest(KEYS[1])}`)
	// counterReadScript reads KEYS[1] as GET and counters need it: {value,
	// pttl}, {nil, -2} when missing, Redis's WRONGTYPE error for a key that
	// is not a string (GET itself would raise it inside the script, which
	// Redis reports as a script error).
	counterReadScript = newScript(`local t = redis.call("TYPE", KEYS[1]).ok
if t == "none" then return {false, -2} end
if t ~= "string" then return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value") end
return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1])}`)
	// counterWriteScript is the max-register's write (counter.go): it sets
	// KEYS[1] to ARGV[1], a canonical decimal int64, unless the key already
	// holds as much, and records the key in the counter registry
	// (RegistryKey, in MarkerDB) for the repair of a master that lost its
	// data (repair.go). It answers 1, or an error without writing: a key of
	// another type, a value with an expiry (a lock) or a value INCR would
	// refuse. Numbers are compared as decimal strings: Lua's doubles hold
	// only 53 bits.
	counterWriteScript = newScript(`local function canon(v)
  return #v <= 20 and (v == "0" or string.match(v, "^-?[1-9]%d*$") ~= nil)
end
local function less(a, b)
  local na, nb = string.sub(a, 1, 1) == "-", string.sub(b, 1, 1) == "-"
  if na ~= nb then return na end
  local r
  if #a ~= #b then r = #a < #b else r = a < b end
  if na and a ~= b then r = not r end
  return r
end
local t = redis.call("TYPE", KEYS[1]).ok
if t ~= "none" and t ~= "string" then
  return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value")
end
local v = redis.call("GET", KEYS[1])
if v then
  if redis.call("PTTL", KEYS[1]) ~= -1 then return redis.error_reply("` + errCounterTTL + `") end
  if not canon(v) then return redis.error_reply("ERR value is not an integer or out of range") end
end
if not v or less(v, ARGV[1]) then redis.call("SET", KEYS[1], ARGV[1]) end
redis.call("SELECT", ARGV[2])
redis.call("SADD", ARGV[3], KEYS[1])
return 1`)
)

// popScript is one round of a blocking pop (BLPOP, BRPOP): the first
// KEY whose list has an element gives it up, popped from its head
// (ARGV[1] "l") or tail ("r"), answered {key, element, pttl, left} with
// the list's PTTL before the pop (for repushScript) and the elements left
// after it (Request.PoppedMore); false when every list is empty. A key of
// another type answers WRONGTYPE, as BLPOP does.
var popScript = newScript(`local pop = "LPOP"
if ARGV[1] == "r" then pop = "RPOP" end
for i = 1, #KEYS do
  local t = redis.call("PTTL", KEYS[i])
  local v = redis.call(pop, KEYS[i])
  if v then return {KEYS[i], v, t, redis.call("LLEN", KEYS[i])} end
end
return false`)

// repushScript puts back an element popped for a client that no longer
// waits: ARGV[1] at the end it was popped from (ARGV[2] "l" or "r"). A
// list it creates again gets back the PTTL it had before the pop
// (ARGV[3]; -1: none, and 0, its last millisecond, is 1), so a signal
// list still expires.
var repushScript = newScript(`local push = "LPUSH"
if ARGV[2] == "r" then push = "RPUSH" end
local n = redis.call(push, KEYS[1], ARGV[1])
local t = tonumber(ARGV[3])
if n == 1 and t and t >= 0 then redis.call("PEXPIRE", KEYS[1], math.max(t, 1)) end
return n`)

// digestLua defines lockproxy_digest(key), the digest of an existing
// key's value that extendScript answers and shortenScript compares: sha1
// of a string's value, of a hash's fields in sorted order (equal hashes
// written in another order on each master serialize differently), else
// of DUMP.
const digestLua = `local function lockproxy_digest(k)
  local t = redis.call("TYPE", k).ok
  local d
  if t == "string" then
    d = redis.call("GET", k)
  elseif t == "hash" then
    local h, p = redis.call("HGETALL", k), {}
    for i = 1, #h, 2 do p[#p + 1] = #h[i] .. ":" .. h[i] .. "=" .. #h[i + 1] .. ":" .. h[i + 1] end
    table.sort(p)
    d = table.concat(p, ",")
  else
    d = redis.call("DUMP", k)
  end
  return redis.sha1hex(t .. ":" .. d)
end
`

// shortenScript lowers a lock's TTL to ARGV[1] ms once its extend was
// granted (Request.shorten): the extend itself never lowers a TTL on a
// master, so that one that fails, or lands late, does not end a lock its
// holder still holds (WrapNoShorten). Only the holder's copy is touched:
// ARGV[2] "t" compares ARGV[3] with a string lock's value, a hash lock's
// field or a sorted-set lock's member, "d" with the digest of the
// tokenless extend (extendScript). It does nothing unless the key still
// expires at ARGV[4], the PEXPIRETIME the extend left on that master
// (WrapCheck): a later write of the key, through any lockproxy, moved it,
// and the shorter TTL would cut a lock granted since (review, helper-57).
var shortenScript = newScript(digestLua + `local t = redis.call("TYPE", KEYS[1]).ok
local mine = false
if ARGV[2] == "t" then
  if t == "string" then mine = redis.call("GET", KEYS[1]) == ARGV[3]
  elseif t == "hash" then mine = redis.call("HEXISTS", KEYS[1], ARGV[3]) == 1
  elseif t == "zset" then mine = redis.call("ZSCORE", KEYS[1], ARGV[3]) ~= false end
elseif t == "string" or t == "hash" then
  mine = lockproxy_digest(KEYS[1]) == ARGV[3]
end
local at = redis.pcall("PEXPIRETIME", KEYS[1])
if type(at) ~= "number" or at ~= tonumber(ARGV[4]) then return 0 end
if mine and redis.call("PTTL", KEYS[1]) > tonumber(ARGV[1]) then redis.call("PEXPIRE", KEYS[1], ARGV[1]) end
return 1`)

// InternalScripts are loaded on every master connection.
func InternalScripts() []Script {
	return []Script{undoScript, hashUndoScript, zremUndoScript, jsonUndoScript, getTTLScript, valuePTTLScript, existsScript, delScript, CappedExtendScript,
		counterReadScript, counterWriteScript, extendScript, shortenScript, popScript, repushScript, raiseScript, hashGetScript, hashExistsScript}
}

// AppendEvalSHA appends EVALSHA sha numkeys keys... args... to dst.
func AppendEvalSHA(dst []byte, sha string, keys [][]byte, args [][]byte) []byte {
	// One allocation, not one per growth: undo commands are built from
	// nil on the reply path. Each bulk costs at most 25 bytes of framing
	// ($, a length of up to 20 digits, two CRLFs), the array header 23.
	size := 23 + 25*(3+len(keys)+len(args)) + len("EVALSHA") + len(sha) + 20
	for _, k := range keys {
		size += len(k)
	}
	for _, a := range args {
		size += len(a)
	}
	dst = slices.Grow(dst, size)
	dst = resp.AppendArrayHeader(dst, 3+len(keys)+len(args))
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, sha)
	dst = resp.AppendBulkInt(dst, int64(len(keys)))
	for _, k := range keys {
		dst = resp.AppendBulk(dst, k)
	}
	for _, a := range args {
		dst = resp.AppendBulk(dst, a)
	}
	return dst
}

// ScriptLoad is the encoded SCRIPT LOAD of body, for Pipeline Init.
func ScriptLoad(body string) []byte {
	return resp.AppendCommandString(nil, "SCRIPT", "LOAD", body)
}

// UndoCommand is the compensating command of an acquisition of keys with
// token: compare-and-delete on each key.
func UndoCommand(keys [][]byte, token []byte) []byte {
	return AppendEvalSHA(nil, undoScript.SHA1, keys, [][]byte{token})
}

// undoCommand is the compensating command of r, a failed acquisition: what
// it wrote on each lock key, taken back without touching another holder's.
func (r *Request) undoCommand() []byte {
	switch r.undoOp {
	case UndoHashDecr:
		return AppendEvalSHA(nil, hashUndoScript.SHA1, r.undoKeys, [][]byte{r.undoToken})
	case UndoZRem:
		return AppendEvalSHA(nil, zremUndoScript.SHA1, r.undoKeys, append([][]byte{r.undoToken}, r.undoExtra()...))
	case UndoJSONField:
		return AppendEvalSHA(nil, jsonUndoScript.SHA1, r.undoKeys, [][]byte{r.undoToken, r.undoExtra()[0]})
	}
	return UndoCommand(r.undoKeys, r.undoToken)
}

// GetTTLCommand reads value and PTTL of key.
func GetTTLCommand(key []byte) []byte {
	return AppendEvalSHA(nil, getTTLScript.SHA1, [][]byte{key}, nil)
}

// ValuePTTLCommand reads KEYS[1]'s value and PTTL, failing as GET does
// on a key that is not a string.
func ValuePTTLCommand(key []byte) []byte {
	return AppendEvalSHA(nil, valuePTTLScript.SHA1, [][]byte{key}, nil)
}

// ExistsCommand reads, per key, whether it exists.
func ExistsCommand(keys [][]byte) []byte {
	return AppendEvalSHA(nil, existsScript.SHA1, keys, nil)
}

// DelCommand deletes keys, reporting per key whether it existed.
func DelCommand(keys [][]byte) []byte {
	return AppendEvalSHA(nil, delScript.SHA1, keys, nil)
}
