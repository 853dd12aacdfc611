-- lua-redis (Debian's lua-redis 2.0.5-dev, under lua5.1) through lockproxy:
-- its handshakes, then the lock flow Lua code writes with it (SET NX PX,
-- scripts, pipelines, and its check-and-set transaction).
--
-- Run by compat/langs_test.go, against one plain redis-server and through
-- lockproxy:
--
--     lua5.1 lua_redis.lua PORT PREFIX
--
-- Each "STEP name result" line is compared with the plain run's; at each
-- "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
-- An assertion that fails exits 1 with the reason on stderr.
local redis = require("redis")

local port, prefix = tonumber(arg[1]), arg[2]

local function fail(msg)
  io.stderr:write("FAIL: " .. msg .. "\n")
  os.exit(1)
end

local function expect(cond, msg)
  if not cond then fail(msg) end
end

local function check(...)
  print("CHECK " .. table.concat({...}, " "))
  io.stdout:flush()
  local answer = io.stdin:read("*l")
  if answer ~= "ok" then fail("checkpoint " .. table.concat({...}, " ") .. ": test answered " .. tostring(answer)) end
end

local function show(v)
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i]) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  return tostring(v)
end

-- step runs f and prints its result, or the first word of the server's
-- error (the error code: both servers' texts differ in detail).
local function step(name, f)
  local ok, r = pcall(f)
  if not ok then
    local word = tostring(r):match("redis error: (%S+)") or tostring(r)
    print("STEP " .. name .. " error " .. word)
    io.stdout:flush()
    return nil
  end
  print("STEP " .. name .. " " .. show(r))
  io.stdout:flush()
  return r
end

print("lua-redis " .. redis._VERSION)
local key = prefix .. "lock"

-- Handshakes.
step("connect", function() return redis.connect("127.0.0.1", port):ping() end)
step("connect table", function() return redis.connect({host = "127.0.0.1", port = port, timeout = 5}):ping() end)
local r = redis.connect("127.0.0.1", port)
local c2 = redis.connect("127.0.0.1", port)
step("select 0", function() return r:select(0) end)
step("auth without requirepass", function() return r:auth("secret") end)
step("info redis_version", function() return r:info().server.redis_version ~= nil end)
step("client setname", function() return r:raw_cmd("CLIENT SETNAME lua-named\r\n") end)
step("echo", function() return r:echo("hi") end)

-- The lock flow.
local tok, other = "lua-token-a", "lua-token-b"
expect(step("set nx px", function() return r:set(key, tok, "NX", "PX", 5000) end) == true, "SET NX PX refused a free lock")
check("held", key, tok)
expect(step("contender set nx px", function() return c2:set(key, other, "NX", "PX", 5000) end) == nil, "a contender got a held lock")
step("get", function() return r:get(key) end)
step("exists", function() return r:exists(key) end)
step("pttl in 1000..5000", function() local t = r:pttl(key) return t >= 1000 and t <= 5000 end)
local extend = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
local release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
expect(step("eval extend", function() return r:eval(extend, 1, key, tok, 8000) end) == 1, "extend failed")
check("pttl", key, 6000, 8000)
step("stranger's extend", function() return c2:eval(extend, 1, key, other, 9000) end)
step("stranger's release", function() return c2:eval(release, 1, key, other) end)
check("held", key, tok)
check("pttl", key, 4000, 8000)
local sha = step("script load", function() return r:script("load", release) end)
step("script exists", function() return r:script("exists", sha) end)
step("evalsha of an unknown sha1", function() return r:evalsha(string.rep("0", 40), 1, key, tok) end)
step("pipeline get, pttl, exists", function()
  local rep = r:pipeline(function(p) p:get(key) p:pttl(key) p:exists(key) end)
  return {rep[1], rep[2] >= 1000 and rep[2] <= 8000, rep[3]}
end)
-- redlock-rb's value-and-PTTL read, sent from Lua.
step("value and pttl read", function()
  local rep = r:eval('return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }', 1, key)
  return {rep[1], rep[2] >= 1000 and rep[2] <= 8000}
end)
-- lua-redis's check-and-set transaction: WATCH, GET, MULTI, DEL, EXEC.
step("transaction cas release", function()
  return r:transaction({watch = key, cas = true}, function(t)
    local v = t:get(key)
    t:multi()
    if v == tok then t:del(key) end
  end)
end)
check("gone", key)
expect(step("set ex nx", function() return c2:set(key, other, "EX", 5, "NX") end) == true, "re-acquire failed")
check("held", key, other)
step("evalsha release", function() return c2:evalsha(sha, 1, key, other) end)
check("gone", key)
step("quit", function() return r:quit() end)
