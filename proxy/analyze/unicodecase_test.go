package analyze

import (
	"strconv"
	"strings"
	"testing"
)

// Redis compares command names and options in ASCII case (strcasecmp);
// Go's strings.ToLower and ToUpper also map 'İ' (U+0130) to 'i', 'ı'
// (U+0131) to 'I', 'ſ' (U+017F) to 'S' and the Kelvin sign (U+212A) to
// 'k'. The model looked commands up with strings.ToLower, so a script
// calling "pexpİre" was understood as PEXPIRE: an acquire with a TTL
// that on Redis takes the key with SETNX and then fails at the unknown
// command, leaving a lock without an expiry (found by review, helper-95).

// TestCommandNamesInASCIICase: a command name that matches a modelled
// command only under Unicode case mapping is no command the model knows.
func TestCommandNamesInASCIICase(t *testing.T) {
	for _, body := range []string{
		"if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then redis.call('pexp\u0130re', KEYS[1], ARGV[2]) return 1 end return 0",
		"return redis.call('\u017fet', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])",
		"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return redis.call('h\u212Aeys', KEYS[1])",
	} {
		if sem, err := Analyze([]byte(body), Options{}); err == nil {
			t.Errorf("understood as %v, but Redis knows no such command:\n%s", sem, body)
		} else if !strings.Contains(err.Error(), "not a command the analyzer models") {
			t.Errorf("refused for another reason: %v\n%s", err, body)
		}
	}
}

// TestUnicodeCaseOptionsAgainstRedis: options spelled with characters that
// Unicode case mapping turns into ASCII get Redis's replies in the model,
// or the model's refusal where it leaves the option out.
func TestUnicodeCaseOptionsAgainstRedis(t *testing.T) {
	c := startRedis(t)
	for _, o := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"zadd", "k1", "\u0131ncr", "1", "m"}, false},
		{[]string{"zadd", "k1", "1", "m"}, false},
		{[]string{"zrange", "k1", "0", "-1", "w\u0131th\u017fcores"}, true},
		{[]string{"set", "k2", "v", "\u212Aeepttl"}, false},
		{[]string{"set", "k2", "v", "NX", "PX", "100000", "GET"}, false},
		{[]string{"pexpire", "k2", "100000", "\u017fT"}, false},
	} {
		c.do(t, "FLUSHALL")
		r := &run{probe: "redis", db: keyspace{}, nowUS: 1_700_000_000_000_000, vals: []string{"k1", "k2"}, nkeys: 2,
			b: testBudget(t, Options{}.withDefaults()), dbArg: -1}
		want := c.do(t, append([]string{"EVAL", "return redis.pcall(unpack(ARGV))", "0"}, o.args...)...)
		got := luaRoundTrip(r.exec(o.args))
		if refused := r.b.refusal != nil; refused != o.refused || (!refused && !sameReply(o.args[0], got, want)) {
			t.Errorf("%s: model %s (refused %v), redis %s", strconv.Quote(strings.Join(o.args, " ")), got, refused, want)
		}
	}
}
