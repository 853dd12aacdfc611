package analyze

import "testing"

// simpleRedisMutex1Acquire is simple-redis-mutex 1.4.0's acquire script,
// byte for byte. The library calls it with KEYS = {lock, last-out-id} and
// ARGV = {value, timeout, fifo id}: the id is empty without FIFO, and the
// script reads two ARGV.
const simpleRedisMutex1Acquire = `
local lockKey = KEYS[1]
local lockValue, timeout = ARGV[1], ARGV[2]

if timeout ~= nil and timeout ~= false and timeout ~= "" then
  return redis.call("SET", lockKey, lockValue, "NX", "PX", timeout)
end

return redis.call("SET", lockKey, lockValue, "NX")
`

// TestArgvCountBlind: a script that names ARGV only to read it at
// constant indexes up to the count analyzed cannot tell how many ARGV it
// got; any other use of the table (or of _G) can.
func TestArgvCountBlind(t *testing.T) {
	// Each body is judged with two ARGV read at most (MinArgs 2).
	blind := []string{
		simpleRedisMutex1Acquire,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`local t = {ARGV[1], n = ARGV[0x2]} return t[1]`,
		`local function f(x) return x end return f(ARGV[1] .. ARGV[2.0])`,
		`return #ARGV[1]`, // the length of an argument, not of ARGV
	}
	seen := []string{
		`local i = 2 return redis.call("pexpire", KEYS[1], ARGV[i])`,
		`return ARGV[tonumber(redis.call("get", KEYS[2]))]`,
		`if redis.call("exists", KEYS[1]) == 1 then return ARGV[3] end return ARGV[1]`,
		`return ARGV["1"]`,
		`return ARGV[0]`,
		`return ARGV[1.5]`,
		`return ARGV[-1]`,
		`return #ARGV`,
		`if #ARGV >= 3 then return 1 end return 0`,
		`for i, v in ipairs(ARGV) do redis.call("set", KEYS[i], v) end`,
		`for k, v in pairs(ARGV) do end`,
		`return next(ARGV, 2)`,
		`return select("#", unpack(ARGV))`,
		`return table.getn(ARGV)`,
		`return table.concat(ARGV, ",")`,
		`return cjson.encode(ARGV)`,
		`local a = ARGV return a[3]`,
		`local function f(t) return #t end return f(ARGV)`,
		`ARGV[3] = ARGV[3] or "ms" return ARGV[3]`,
		`ARGV = {} return 1`,
		`return _G.ARGV[3]`,
		`return _G["AR" .. "GV"][3]`,
		`return rawget(_G, "ARGV")`,
		`local ARGV = {1, 2} return ARGV[1]`,
		`local f = function(ARGV) return ARGV[1] end return f({})`,
		`for ARGV = 1, 2 do end return 0`,
		`for _, ARGV in ipairs(KEYS) do end return 0`,
		`local x = ARGV:len() return x`,
		`local f = function() return #ARGV end return f()`,
		`if true then return #ARGV end`,
		`repeat local n = #ARGV until true return 0`,
	}
	for _, b := range blind {
		if !argvCountBlind([]byte(b), 2) {
			t.Errorf("argvCountBlind = false, want true (it only indexes ARGV):\n%s", b)
		}
	}
	for _, b := range seen {
		if argvCountBlind([]byte(b), 2) {
			t.Errorf("argvCountBlind = true, want false (the count is in reach):\n%s", b)
		}
	}
}

// TestExtraArgvUnreadUnderstood: simple-redis-mutex 1.x's acquire is
// understood (a SET NX PX whose TTL is ARGV[2]) with two ARGV, and marked
// count-blind, so that the library's calls with a third, unread argument
// are run. The optional-unit script of hidden_test.go is not: it reads
// #ARGV.
func TestExtraArgvUnreadUnderstood(t *testing.T) {
	sem, err := Analyze([]byte(simpleRedisMutex1Acquire), Options{})
	if err != nil {
		t.Fatalf("simple-redis-mutex 1.x acquire refused: %v", err)
	}
	if sem.Kind != Acquire || sem.MinArgs != 2 || !sem.ArgvCountBlind {
		t.Fatalf("understood as %s (MinArgs %d, ArgvCountBlind %v); want an acquire reading 2 ARGV, blind to more", sem, sem.MinArgs, sem.ArgvCountBlind)
	}
	counting := `if #ARGV >= 3 and ARGV[3] == 'ms' then
  return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'ex', ARGV[2])`
	sem, err = Analyze([]byte(counting), Options{})
	if err == nil && sem.ArgvCountBlind {
		t.Fatalf("a script reading #ARGV is marked count-blind: %s", sem)
	}
}
