package analyze

import (
	"strings"
	"testing"
)

// runOnce runs body once with the given KEYS and ARGV on db, for tests of
// the sandbox and the model.
func runOnce(t *testing.T, body string, nkeys int, vals []string, db keyspace) (outcome, *Refusal) {
	t.Helper()
	opt := Options{}.withDefaults()
	proto, err := compile([]byte(body), opt.MaxBodyBytes)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	b := testBudget(t, opt)
	v := newVM(proto, b)
	defer v.L.Close()
	if db == nil {
		db = keyspace{}
	}
	r := &run{probe: "test", db: db, nowUS: clockA, vals: vals, nkeys: nkeys, b: b, dbArg: -1}
	return v.exec(r)
}

// scriptReplies are scripts run on KEYS = {"k"}, ARGV = {"abc"}, with k
// holding "abc", and their replies (TestScriptRepliesAgainstRedis checks
// them on a real server too).
var scriptReplies = []struct{ body, want string }{
	{`return 3.99`, ":3"},
	{`return -2.7`, ":-2"},
	{`return "OK"`, `"OK"`},
	{`return true`, ":1"},
	{`return false`, "nil"},
	{`return nil`, "nil"},
	{`return {1, 2.7, "x", true, false, nil, 5}`, `[:1 :2 "x" :1 nil]`},
	{`return {ok="FOO"}`, "+FOO"},
	{`return {err="MY bad"}`, "-MY bad"},
	{`return redis.error_reply("bad")`, "-ERR bad"},
	{`return redis.status_reply("OK")`, "+OK"},
	{`return redis.call("get", ARGV[1])`, "nil"},
	{`return type(redis.call("get", ARGV[1]))`, `"boolean"`},
	{`return redis.call("set", KEYS[1], 1.5)`, "+OK"},
	{`redis.call("set", KEYS[1], 0.1) return redis.call("get", KEYS[1])`, `"0.10000000000000001"`},
	{`return tostring(1e15) .. " " .. 1700000000123 .. " " .. 0.1`, `"1e+15 1700000000123 0.1"`},
	{`return redis.pcall("incr", "k")`, "-ERR value is not an integer or out of range"},
	{`local ok, e = pcall(redis.call, "incr", KEYS[1]) return e`, `"ERR value is not an integer or out of range"`},
	{`return redis.pcall("set", KEYS[1], "v", "px", 0)`, "-ERR invalid expire time in 'set' command"},
	{`return redis.pcall("set", KEYS[1])`, "-ERR Wrong number of args calling Redis command from script"},
	{`return redis.call("time")`, `["1700000000" "123456"]`},
	{`return cjson.encode({a = {1, 2, "x/y"}})`, `"{\"a\":[1,2,\"x\\/y\"]}"`},
	{`return cjson.decode('{"owner":"t1","n":[1,2]}').owner`, `"t1"`},
	{`return bit.band(0xff, 0x0f) + bit.lshift(1, 4)`, ":31"},
	{`return bit.tohex(-1)`, `"ffffffff"`},
	{`return string.format("%d:%s:%5.1f", 3, "a", 2.25)`, `"3:a:  2.2"`},
	{`return string.rep("ab", 3)`, `"ababab"`},
	{`return redis.sha1hex("")`, `"da39a3ee5e6b4b0d3255bfef95601890afd80709"`},
	{`x = 1 return 1`, "-ERR user_script:1: Attempt to modify a readonly table"},
	{`return undefinedthing`, "-ERR user_script:1: Script attempted to access nonexistent global variable 'undefinedthing'"},
	{`return getmetatable(KEYS)`, "nil"},
	{`return #KEYS + #ARGV`, ":2"},
	{`return KEYS[3]`, "nil"},
	{`return redis.call("hset", ARGV[1], "f", 1) + redis.call("hincrby", ARGV[1], "f", 41)`, ":43"},
	{`return redis.pcall("hincrby", KEYS[1], "f", 1)`, "-WRONGTYPE Operation against a key holding the wrong kind of value"},
	{`return {redis.call("zadd", ARGV[1], 1.5, "a", 2, "b"), redis.call("zrange", ARGV[1], 0, -1, "WITHSCORES")}`, `[:2 ["a" "1.5" "b" "2"]]`},
	{`return redis.call("getrange", KEYS[1], -2, -1)`, `"bc"`},
	{`return cjson.encode(cjson.decode('[1,"a",null,true]'))`, `"[1,\"a\",null,true]"`},
	{`return string.format("%q", "a\nb")`, `"\"a\\\nb\""`},
	{`return tostring(1/3)`, `"0.33333333333333"`},
	{`return 2^53`, ":9007199254740992"},
	{`return redis.pcall("expire", KEYS[1], "9223372036854775807")`, "-ERR invalid expire time in 'expire' command"},
	// A numeric for takes strings that read as numbers, as Lua 5.1 does
	// (IPC::ConcurrencyLimit's for i = 1, ARGV[1]).
	{`local n = 0 for i = "1", " 3 ", "1" do n = n + i end return n`, ":6"},
	{`local t = {} for i = 1, "2" do t[#t + 1] = type(i) end return t`, `["number" "number"]`},
	{`for i = 1, ARGV[1] do end return 1`, "-ERR user_script:1: 'for' limit must be a number"},
	{`for i = {}, 2 do end return 1`, "-ERR user_script:1: 'for' initial value must be a number"},
	{`for i = 1, 2, "x" do end return 1`, "-ERR user_script:1: 'for' step must be a number"},
}

func TestSandboxReplies(t *testing.T) {
	for _, c := range scriptReplies {
		o, ref := runOnce(t, c.body, 1, []string{"k", "abc"}, keyspace{"k": {typ: typeString, str: "abc"}})
		if ref != nil {
			t.Errorf("%s: refused: %v", c.body, ref)
			continue
		}
		if got := o.reply.String(); got != c.want {
			t.Errorf("%s: got %s, want %s", c.body, got, c.want)
		}
	}
}

func TestSandboxRefusals(t *testing.T) {
	cases := []struct {
		body  string
		class Class
		text  string
	}{
		{`return redis.call("FLUSHALL")`, ClassCommand, "FLUSHALL is not a command the analyzer models"},
		{`return redis.pcall("CONFIG", "SET", "x", "y")`, ClassCommand, "CONFIG is not a command"},
		{`return pcall(redis.call, "EVAL", "return 1", 0)`, ClassCommand, "EVAL is not a command"},
		{`return redis.call("GET", KEYS[1] .. ":x")`, ClassKey, `the key "k:x" does not come verbatim`},
		{`return redis.call("SELECT", 1)`, ClassDatabase, "SELECT 1"},
		{`return math.random(10)`, ClassRandom, "math.random"},
		{`return os.time()`, ClassClock, "os.*"},
		{`return loadstring("return 1")()`, ClassLibrary, "loadstring"},
		{`return cmsgpack.pack(1)`, ClassLibrary, "cmsgpack"},
		{`return string.match("a", "a")`, ClassLibrary, "string.match"},
		{`while true do end`, ClassBudget, "steps"},
		{`local s = "x" while true do s = s .. s end`, ClassBudget, "bytes"},
		{`return string.rep("x", 1e9)`, ClassBudget, "bytes"},
		{`local ok = pcall(function() while true do end end) while true do pcall(function() end) end`, ClassBudget, "steps"},
	}
	for _, c := range cases {
		_, ref := runOnce(t, c.body, 1, []string{"k", "abc"}, nil)
		if ref == nil {
			t.Errorf("%s: not refused", c.body)
			continue
		}
		if ref.Class != c.class || !strings.Contains(ref.Error(), c.text) {
			t.Errorf("%s: got %v (%s), want class %s containing %q", c.body, ref, ref.Class, c.class, c.text)
		}
	}
}
