package analyze

import (
	"strings"
	"testing"
)

// variants are the ways issue 13 lists in which real libraries write the
// scripts lockproxy used to refuse, each as a small script of its kind.
var variants = []struct {
	name string
	body string
	want corpusWant
	// check, when set, tests what Semantics.String does not show.
	check func(*testing.T, *Semantics)
}{
	{name: "local aliases", body: `
local key = KEYS[1]
local id = ARGV[1]
local v = redis.call('get', key)
if v == id then
  return redis.call('del', key)
end
return 0`, want: corpusWant{sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`}},

	{name: "early return instead of else", body: `
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return 1`, want: corpusWant{sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`}},

	// simple-redis-mutex 3: a release that returns nothing either way
	// (and publishes when it deleted); the client hears nil, as from one
	// Redis.
	{name: "release answering the same either way", body: `
  local lockKey = KEYS[1]
  local updatesChannel = KEYS[2]
  local lockValue = ARGV[1]

  if redis.call("GET", lockKey) == lockValue then
      redis.call("DEL", lockKey)
      redis.call(
        "PUBLISH",
        updatesChannel,
        string.format('{ "key": "%s", "value": "%s" }', lockKey, lockValue)
      )
  end
`, want: corpusWant{sem: `release string keys=KEYS[1] token=ARGV[1] yes=nil no=nil same-reply`,
		publish: []string{`publish KEYS[2] "{ \"key\": \"${KEYS[1]}\", \"value\": \"${ARGV[1]}\" }"`}}},

	// redlock-universal 0.8's ATOMIC_EXTEND: nothing when too little TTL
	// is left (ARGV[2]), then the token check. The probes' usual held TTLs
	// are below every argument, so its token's role shows only in the
	// second analysis with held TTLs above them (longheld.go; the exact
	// text and lookalikes in longheld_test.go).
	{name: "extend guarded by the remaining TTL", body: redlockUniversalAtomicExtend,
		want: corpusWant{sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[3] ms yes=array whose first element is integer 1 no=[:-1 :0] (PTTL at 2)`}},

	{name: "swapped == operands", body: `if ARGV[1] == redis.call("get", KEYS[1]) then return redis.call("del", KEYS[1]) else return 0 end`,
		want: corpusWant{sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`}},

	{name: "SELECT preamble shifting ARGV (extend)", body: `
redis.pcall("SELECT", tonumber(ARGV[1]))
if redis.call("GET", KEYS[1]) == ARGV[2] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[3])
end
return 0`, want: corpusWant{sem: `extend string keys=KEYS[1] token=ARGV[2] ttl=ARGV[3] ms yes=integer 1 no=:0 db=ARGV[1]`}},

	{name: "SELECT preamble shifting ARGV (acquire)", body: `
redis.pcall("SELECT", tonumber(ARGV[1]))
return redis.call("SET", KEYS[1], ARGV[2], "NX", "PX", ARGV[3])`,
		want: corpusWant{sem: `acquire string keys=KEYS[1] token=ARGV[2] ttl=ARGV[3] ms yes=status "OK" no=nil undo=del-if-value(ARGV[2]) no-is-noop db=ARGV[1]`}},

	// go-zero's RedisLock: bulk "OK" for the holder's re-acquire, SET's +OK
	// for a new lock, nil when taken.
	{name: `return "OK" bulk (acquire-or-extend)`, body: `
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
    return "OK"
else
    return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])
end`, want: corpusWant{sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=status or bulk "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
		check: func(t *testing.T, s *Semantics) {
			for _, r := range []Reply{okReply, bulkReply("OK")} {
				if !s.Yes.Match(&r, 1) {
					t.Errorf("%s is not a yes", r)
				}
			}
		}},

	{name: "{1, ttl} array verdict", body: `
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return {1, redis.call("PTTL", KEYS[1])}
end
return {-1, redis.call("PTTL", KEYS[1])}`,
		want: corpusWant{sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=array whose first element is integer 1 no=[:-1 :0] (PTTL at 2) undo=del-if-value(ARGV[1]) no-is-noop`}},

	{name: "TTL in KEYS[2]", body: `return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", KEYS[2])`,
		want: corpusWant{sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=KEYS[2] ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`, min: "2/1"}},

	{name: "read returning PTTL or 0", body: `
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PTTL", KEYS[1])
end
return 0`, want: corpusWant{sem: `read string keys=KEYS[1] token=ARGV[1] yes=integer > 0 no=:0 reply-is-ttl`}},

	{name: "Redisson-style hash lock with HSET", body: `
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`,
		want: corpusWant{sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`}},

	// pjimming/rlock's acquire: Redisson's, answering 0 where Redisson
	// answers nil (reach sweep of 2026-11-28). Its no reply's placeholder
	// PTTL is 1: 0 would read as its yes.
	{name: "Redisson-style hash lock whose yes is 0", body: `
if (redis.call('EXISTS', KEYS[1]) == 0) then
    -- don't have lock
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return 0
end
if (redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1) then
    -- reentry
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return 0
end
return redis.call('PTTL', KEYS[1])`,
		want: corpusWant{sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 0 no=:1 (PTTL at 0) undo=hash-decr(ARGV[1]) no-is-noop`}},

	// cheerego/go-redisson's Mutex: tokenless, 0 or the holder's PTTL.
	{name: "tokenless lock whose yes is 0", body: `
if (redis.call('exists', KEYS[1]) == 0) then
	redis.call('set', KEYS[1], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return 0;
end;
return redis.call('pttl', KEYS[1]);`,
		want: corpusWant{sem: `acquire string keys=KEYS[1] tokenless="1" ttl=ARGV[1] ms yes=integer 0 no=:1 (PTTL at 0) undo=del-if-value("1") no-is-noop`}},

	{name: "Symfony save (sorted set, now from TIME)", body: symfonySave,
		want: corpusWant{sem: `acquire-or-extend zset keys=KEYS[1] token=ARGV[2] ttl=ARGV[3] ms yes=integer 1 no=nil undo=zrem(ARGV[2],"__write__") no-is-noop`},
		check: func(t *testing.T, s *Semantics) {
			if !s.ReadsClock {
				t.Error("ReadsClock is false")
			}
		}},
	{name: "Symfony putOffExpiration", body: symfonyPutOff,
		want: corpusWant{sem: `extend zset keys=KEYS[1] token=ARGV[2] ttl=ARGV[3] ms yes=integer 1 no=nil`}},
	{name: "Symfony delete", body: symfonyDelete,
		want: corpusWant{sem: `release zset keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`}},
	{name: "Symfony exists", body: symfonyExists,
		want: corpusWant{sem: `read zset keys=KEYS[1] token=ARGV[2] yes=integer 1 no=nil`}},
	// Symfony's clock probe: TIME read and ignored, a constant 1 ms TTL.
	{name: "Symfony clock probe", body: `
                local now = redis.call("TIME")
                redis.call("SET", KEYS[1], "1", "PX", 1)

	            return 1`,
		want: corpusWant{sem: `acquire force string keys=KEYS[1] tokenless="1" ttl=1ms yes=integer 1 no=nil undo=del-if-value("1") no-is-noop`}},

	{name: "MSETNX over every KEYS", body: `
local args = {}
for i, k in ipairs(KEYS) do
  args[#args + 1] = k
  args[#args + 1] = ARGV[1]
end
if redis.call('MSETNX', unpack(args)) == 0 then return 0 end
for i, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[2]) end
return #KEYS`, want: corpusWant{sem: `acquire string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0 undo=del-if-value(ARGV[1]) no-is-noop`}},

	{name: "EXISTS over every KEYS then SET each", body: `
for i, key in ipairs(KEYS) do
  if redis.call("exists", key) == 1 then return 0 end
end
for i, key in ipairs(KEYS) do
  redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return #KEYS`, want: corpusWant{sem: `acquire string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0 undo=del-if-value(ARGV[1]) no-is-noop`}},

	{name: "MGET compare then PEXPIRE each", body: `
local vals = redis.call('MGET', unpack(KEYS))
for i, v in ipairs(vals) do
  if v ~= ARGV[1] then return 0 end
end
for i, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[2]) end
return #KEYS`, want: corpusWant{sem: `extend string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0`}},

	{name: "MGET compare then DEL each", body: `
local vals = redis.call('MGET', unpack(KEYS))
for i, v in ipairs(vals) do
  if v ~= ARGV[1] then return 0 end
end
return redis.call('DEL', unpack(KEYS))`, want: corpusWant{sem: `release string keys=KEYS[1].. token=ARGV[1] yes=integer = #KEYS no=:0`}},

	{name: "MGET compare answering the minimum PTTL", body: `
local vals = redis.call('MGET', unpack(KEYS))
local least = -1
for i, v in ipairs(vals) do
  if v ~= ARGV[1] then return -1 end
  local t = redis.call('PTTL', KEYS[i])
  if least < 0 or t < least then least = t end
end
return least`, want: corpusWant{sem: `read string keys=KEYS[1].. token=ARGV[1] yes=integer >= 0 no=:-1 reply-is-ttl`}},

	{name: "tokenless SET k 1 when absent, EX seconds", body: `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], 1, 'EX', ARGV[1])
  return 1
end
return 0`, want: corpusWant{sem: `acquire string keys=KEYS[1] tokenless="1" ttl=ARGV[1] s yes=integer 1 no=:0 undo=del-if-value("1") no-is-noop`}},
	{name: "tokenless DEL", body: `return redis.call('DEL', KEYS[1])`,
		want: corpusWant{sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=:0`}},

	{name: "SET NX EX seconds", body: `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])`,
		want: corpusWant{sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] s yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`}},
	{name: "EXPIRE seconds", body: `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 0`, want: corpusWant{sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] s yes=integer 1 no=:0`}},

	{name: "cjson.decode compare (release)", body: `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local lock = cjson.decode(raw)
if lock.owner == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`, want: corpusWant{sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`}},
	{name: "cjson.encode value (acquire)", body: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], cjson.encode({owner = ARGV[1]}), 'PX', ARGV[2])
return 1`, want: corpusWant{sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0 undo=del-if-value(ARGV[1] json.owner) no-is-noop`}},

	{name: "key in ARGV with numkeys 0 (acquire)", body: `return redis.call('SET', ARGV[1], ARGV[2], 'NX', 'PX', ARGV[3])`,
		want: corpusWant{sem: `acquire string keys=ARGV[1] token=ARGV[2] ttl=ARGV[3] ms yes=status "OK" no=nil undo=del-if-value(ARGV[2]) no-is-noop`, min: "0/3"}},
	{name: "key in ARGV with numkeys 0 (release)", body: `if redis.call('GET', ARGV[1]) == ARGV[2] then return redis.call('DEL', ARGV[1]) end
return 0`, want: corpusWant{sem: `release string keys=ARGV[1] token=ARGV[2] yes=integer 1 no=:0`}},

	{name: "application name embedded in the text", body: `
-- billing-service distributed lock, v2 (owner: team-payments)
local app = "billing-service"
if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.log(redis.LOG_DEBUG, app .. " releases " .. KEYS[1])
  return redis.call("del", KEYS[1])
end
return 0`, want: corpusWant{sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`}},

	{name: "fencing counter returned", body: `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`, want: corpusWant{sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer > 0 no=:0 undo=del-if-value(ARGV[1]) no-is-noop`},
		check: func(t *testing.T, s *Semantics) {
			if len(s.Counters) != 1 || s.Counters[0].Key != (Arg{Keys: true, Index: 2}) || !s.Counters[0].Returned {
				t.Errorf("counters %+v, want KEYS[2] returned", s.Counters)
			}
		}},

	{name: "SPUBLISH and a signal list", body: `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SPUBLISH', KEYS[2], 'released')
  redis.call('RPUSH', KEYS[3], 1)
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return 1
end
return 0`, want: corpusWant{sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`,
		other: []string{"KEYS[3] expires after ARGV[2] ms"}, publish: []string{`spublish KEYS[2] "released"`}},
		check: func(t *testing.T, s *Semantics) {
			if len(s.Pushes) != 1 || s.Pushes[0].Key != (Arg{Keys: true, Index: 3}) || s.Pushes[0].Value.Const != "1" {
				t.Errorf("pushes %+v, want rpush KEYS[3] \"1\"", s.Pushes)
			}
		}},
}

func TestVariants(t *testing.T) {
	for _, c := range variants {
		t.Run(c.name, func(t *testing.T) {
			if s := checkSemantics(t, []byte(c.body), c.want); s != nil && c.check != nil {
				c.check(t, s)
			}
		})
	}
}

// The variants' scripts are one shape whatever their spelling: the
// analysis of equivalent texts is the same.
func TestVariantsSpelling(t *testing.T) {
	a, err := Analyze([]byte(`if redis.call("get",KEYS[1])==ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze([]byte("local k, t = KEYS[1], ARGV[1]\nlocal cur = redis.call('GET', k)\nif t ~= cur then return 0 end\nreturn redis.call('UNLINK', k)"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() || !strings.HasPrefix(a.String(), "release ") {
		t.Errorf("%s\n%s", a, b)
	}
}

const symfonySave = `
            local key = KEYS[1]
            local uniqueToken = ARGV[2]
            local ttl = tonumber(ARGV[3])

            -- asserts the KEY is compatible with current version (old Symfony <5.2 BC)
            if redis.call("TYPE", key).ok == "string" then
                return false
            end

            local now = redis.call("TIME")
            now = now[1] * 1000 + math.floor(now[2] / 1000)

            -- Remove expired values
            redis.call("ZREMRANGEBYSCORE", key, "-inf", now)

            -- is already acquired
            if redis.call("ZSCORE", key, uniqueToken) then
                -- is not WRITE lock and cannot be promoted
                if not redis.call("ZSCORE", key, "__write__") and redis.call("ZCOUNT", key, "-inf", "+inf") > 1  then
                    return false
                end
            elseif redis.call("ZCOUNT", key, "-inf", "+inf") > 0  then
                return false
            end

            redis.call("ZADD", key, now + ttl, uniqueToken)
            redis.call("ZADD", key, now + ttl, "__write__")

            -- Extend the TTL of the key
            local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
            redis.call("PEXPIREAT", key, maxExpiration)

            return true
`

const symfonyPutOff = `
            local key = KEYS[1]
            local uniqueToken = ARGV[2]
            local ttl = tonumber(ARGV[3])

            if redis.call("TYPE", key).ok == "string" then
                return false
            end

            local now = redis.call("TIME")
            now = now[1] * 1000 + math.floor(now[2] / 1000)

            if not redis.call("ZSCORE", key, uniqueToken) then
                return false
            end

            redis.call("ZADD", key, now + ttl, uniqueToken)
            if redis.call("ZSCORE", key, "__write__") then
                redis.call("ZADD", key, now + ttl, "__write__")
            end

            local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
            redis.call("PEXPIREAT", key, maxExpiration)

            return true
`

const symfonyDelete = `
            local key = KEYS[1]
            local uniqueToken = ARGV[1]

            if redis.call("TYPE", key).ok == "string" then
                return false
            end

            if not redis.call("ZSCORE", key, uniqueToken) then
                return false
            end

            redis.call("ZREM", key, uniqueToken)
            redis.call("ZREM", key, "__write__")

            local maxExpiration = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")[2]
            if nil ~= maxExpiration then
                redis.call("PEXPIREAT", key, maxExpiration)
            end

            return true
`

const symfonyExists = `
            local key = KEYS[1]
            local uniqueToken = ARGV[2]

            if redis.call("TYPE", key).ok == "string" then
                return false
            end

            local now = redis.call("TIME")
            now = now[1] * 1000 + math.floor(now[2] / 1000)

            redis.call("ZREMRANGEBYSCORE", key, "-inf", now)

            if redis.call("ZSCORE", key, uniqueToken) then
                return true
            end

            return false
`
