package quorum

// The Lua that WrapCheck and WrapGuard put around a script's body
// (check.go): what each master reads and puts back.

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
