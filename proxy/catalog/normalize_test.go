package catalog

import (
	"regexp"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/quorum"
)

func TestNormalizeTokens(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// whitespace, CRLF, comments
		{"return  1", "return 1"},
		{"\r\n\treturn\r\n1\r\n", "return 1"},
		{"return 1 -- done", "return 1"},
		{"--[[ block\n comment ]] return 1", "return 1"},
		{"--[==[ block ]] still ]=] comment ]==] return 1", "return 1"},
		{"--[= not a block\nreturn 1", "return 1"},
		{"return --[[x]] 1", "return 1"},
		{"a = 1 - -1", "a = 1 - - 1"},
		// operators
		{"a=b..c", "a = b .. c"},
		{"f(...)", "f ( ... )"},
		{"a==b a~=b a<=b a>=b a<b a>b", "a == b a ~= b a <= b a >= b a < b a > b"},
		{"::top::", ":: top ::"},
		{"t[#t+1]=x%2^3", "t [ # t + 1 ] = x % 2 ^ 3"},
		{"o:m{1,2}", "o : m { 1 , 2 }"},
		// numerals are kept verbatim, consumed as Lua 5.1 does
		{"x=0x1F+1e-5+.5+3.", "x = 0x1F + 1e-5 + .5 + 3."},
		{"x=0xe-1", "x = 0xe - 1"},
		{"x=1..2", "x = 1..2"},
		// strings: one canonical double-quoted form
		{`x='a"b'`, `x = "a\"b"`},
		{`x="it's"`, `x = "it's"`},
		{`x='\65\066\0677'`, `x = "ABC7"`},
		{`x="\x41\z\q"`, `x = "x41zq"`}, // Lua 5.1: unknown escapes are the character itself
		{`x="\a\b\f\n\r\t\v\\\"\'"`, `x = "\007\008\012\n\r\t\011\\\"'"`},
		{"x=\"a\\\r\nb\"", `x = "a\nb"`},
		{"x=\"\x00\x7f\xc3\xa9\"", "x = \"\\000\\127\xc3\xa9\""},
		{"x=[[\nline1\r\nline2]]", `x = "line1\nline2"`},
		{"x=[==[a]]b]=]c]==]", `x = "a]]b]=]c"`},
		{"x=[=[a[[b]=]", `x = "a[[b"`},
		{"x=[[]]", `x = ""`},
		// redis.pcall is redis.call; a command name literal is lowercased
		{`redis.pcall("DEL",KEYS[1])`, `redis . call ( "del" , KEYS [ 1 ] )`},
		{`redis.call('SET',KEYS[1],'NX')`, `redis . call ( "set" , KEYS [ 1 ] , "NX" )`},
		{`redis.call([[GET]])`, `redis . call ( "get" )`},
		{`redis.call("GE".."T")`, `redis . call ( "GE" .. "T" )`},
		{`redis.call("A"=="B" and "x" or "y")`, `redis . call ( "A" == "B" and "x" or "y" )`},
		{`x.redis.pcall("GET")`, `x . redis . pcall ( "GET" )`},
		{`redis.status_reply("OK")`, `redis . status_reply ( "OK" )`},
		// ';' only where Lua needs it, and a line break there reads as ';'
		{"a=1;b=2;", "a = 1 b = 2"},
		{"end;return 0", "end return 0"},
		{"local x = f;(g)()", "local x = f ; ( g ) ( )"},
		{"local x = f\n(g)()", "local x = f ; ( g ) ( )"},
		{"local x = f(g)()", "local x = f ( g ) ( )"},
		{"local x = f --[[\n]](g)()", "local x = f ; ( g ) ( )"},
		{"x = 1;(g)()", "x = 1 ( g ) ( )"},
		{"f'a';('b'):len()", `f "a" ; ( "b" ) : len ( )`},
		// a Redis 7 shebang is a line of its own
		{"#!lua flags=no-writes \r\nreturn 1", "#!lua flags=no-writes\nreturn 1"},
		// not Lua tokens
		{"return 'a", ""},
		{"return \"a\nb\"", ""},
		{"return [[a", ""},
		{"--[[ a", ""},
		{"return [=x", ""},
		{"return [[a [[b]]", ""},
		{`return "\256"`, ""},
		{"return @x", ""},
		{"return a != b", ""},
		{"return $", ""},
		{"\xef\xbb\xbfreturn 1", ""},
		{"return\x001", ""},
		{"", ""},
	} {
		if got := Normalize([]byte(tc.in)); got != tc.want {
			t.Errorf("Normalize(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// variant is a reformatting of a script that keeps its meaning.
type variant struct {
	name string
	f    func(string) string
}

var (
	commandArg  = regexp.MustCompile(`(redis\.p?call\(\s*)(["'])([A-Za-z]+)(["'])`)
	lineEnd     = regexp.MustCompile(`([)\]0-9a-zA-Z_])([ \t]*)(\n|$)`)
	afterThen   = regexp.MustCompile(`\bthen\b`)
	statements  = regexp.MustCompile(`([)0-9]) (else|elseif|end)\b`)
	lineComment = regexp.MustCompile(`--[^\n]*`)
)

// stripComments drops the line comments of a catalogued body, before
// rewrites that join lines. (The bodies have no "--" in a string.)
func stripComments(s string) string { return lineComment.ReplaceAllString(s, "") }

// toggleCommandCase upper-cases lower-case command names and vice versa.
func toggleCommandCase(s string) string {
	return commandArg.ReplaceAllStringFunc(s, func(m string) string {
		p := commandArg.FindStringSubmatch(m)
		name := strings.ToUpper(p[3])
		if name == p[3] {
			name = strings.ToLower(p[3])
		}
		return p[1] + p[2] + name + p[4]
	})
}

// The catalogued bodies have no whitespace or quotes inside their string
// literals, so these plain text rewrites keep their meaning.
var variants = []variant{
	{"crlf", func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }},
	{"tabs to spaces", func(s string) string { return strings.ReplaceAll(s, "\t", "    ") }},
	{"reindent", func(s string) string {
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			lines[i] = "\t\t" + strings.TrimLeft(l, " \t") + "  "
		}
		return strings.Join(lines, "\n")
	}},
	{"one line", func(s string) string { return strings.Join(strings.Fields(stripComments(s)), " ") }},
	{"a token per line", func(s string) string {
		s = strings.NewReplacer(",", "\n,\n", "==", "\n==\n", "~=", "\n~=\n", "[", "\n[", "=", " = ").Replace(s)
		return strings.Join(strings.Fields(stripComments(s)), "\n")
	}},
	{"tight", func(s string) string { return strings.NewReplacer(", ", ",", " == ", "==", " ~= ", "~=").Replace(s) }},
	{"single quotes", func(s string) string {
		return strings.NewReplacer(`"`, `'`, `'`, `"`).Replace(s)
	}},
	{"long brackets", func(s string) string {
		return regexp.MustCompile(`["']([A-Za-z0-9]*)["']`).ReplaceAllString(s, "[==[$1]==]")
	}},
	{"command case", toggleCommandCase},
	{"comments", func(s string) string {
		s = lineEnd.ReplaceAllString(s, "$1$2 -- trailing comment$3")
		s = afterThen.ReplaceAllString(s, "then --[[ a\nblock ]]")
		return "--[==[ header\n]] ]=] ]==]\n" + s + "\n-- the end"
	}},
	{"semicolons", func(s string) string {
		s = lineEnd.ReplaceAllString(s, "$1;$2$3")
		return statements.ReplaceAllString(s, "$1; $2")
	}},
	{"pcall", func(s string) string {
		if strings.Contains(s, "redis.pcall") {
			return strings.ReplaceAll(s, "redis.pcall", "redis.call")
		}
		return strings.ReplaceAll(s, "redis.call", "redis.pcall")
	}},
}

// TestNormalizeVariants: every catalogued script, reformatted in each way
// (and all of them at once), is still recognized as itself.
func TestNormalizeVariants(t *testing.T) {
	c := newTestCatalog(t)
	all := func(s string) string {
		for _, v := range variants {
			s = v.f(s)
		}
		return s
	}
	for _, s := range c.Scripts() {
		want := Normalize([]byte(s.Body))
		for _, v := range append(variants, variant{"all at once", all}) {
			body := v.f(s.Body)
			if got := Normalize([]byte(body)); got != want {
				t.Errorf("%s, %s:\n%s\n got %q\nwant %q", s.Name, v.name, body, got, want)
				continue
			}
			m := c.Match([]byte(body))
			if m == nil || !sameVote(m, s) {
				t.Errorf("%s, %s: Match = %v", s.Name, v.name, m)
			}
		}
	}
}

// mutation changes what a script does; the result must not be taken for
// the script.
type mutation struct{ from, to string }

var mutations = []mutation{
	{"==", "~="},
	{"~=", "=="},
	{"<", "<="},
	{"ARGV[1]", "ARGV[2]"},
	{"ARGV[2]", "ARGV[1]"},
	{"ARGV[3]", "ARGV[2]"},
	{"KEYS[1]", "KEYS[2]"},
	{"return 0", "return 1"},
	{"return 1", "return 0"},
	{"return -1", "return 0"},
	{"return -3", "return -2"},
	{"return count", "return #KEYS"},
	{"return #KEYS", "return 1"},
	{"count + 1", "count + 2"},
	{"not token or", "token or"},
	{`"del"`, `"unlink"`},
	{`"DEL"`, `"UNLINK"`},
	{`'del'`, `'unlink'`},
	{`"pexpire"`, `"expire"`},
	{`'pexpire'`, `'expire'`},
	{`"PEXPIRE"`, `"EXPIRE"`},
	{`"PEXPIREAT"`, `"EXPIREAT"`},
	{`"expire"`, `"pexpire"`},
	{`"PX"`, `"EX"`},
	{`"PXAT"`, `"EXAT"`},
	{`"NX", `, ``},
	{`, "NX"`, ``},
	{`"NX"`, `"nx"`}, // literal case outside command names is kept: conservative
	{`"OK"`, `"ok"`},
	{`"0"`, `"1"`},
	{"return 2", "return 0"},
	{"== 1", "== 0"},
	{"val == false", "val == nil"},
	{`"exists"`, `"get"`},
	{`"GET"`, `"EXISTS"`},
	{`"ttl"`, `"pttl"`},
	{`"lpush"`, `"rpush"`},
	{"status_reply", "error_reply"},
	{"getrange", "get"},
	{"offset-1", "offset"},
}

// TestNormalizeMutations: a catalogued script changed in meaning does not
// normalize to its original, and Match does not return the original.
func TestNormalizeMutations(t *testing.T) {
	c := newTestCatalog(t)
	applied := map[mutation]bool{}
	for _, s := range c.Scripts() {
		orig := Normalize([]byte(s.Body))
		for _, m := range mutations {
			if !strings.Contains(s.Body, m.from) {
				continue
			}
			applied[m] = true
			body := strings.Replace(s.Body, m.from, m.to, 1)
			if got := Normalize([]byte(body)); got == orig {
				t.Errorf("%s: %q → %q normalizes to the original", s.Name, m.from, m.to)
			}
			if got := c.Match([]byte(body)); got != nil && Normalize([]byte(got.Body)) == orig {
				t.Errorf("%s: %q → %q still matches %s", s.Name, m.from, m.to, got.Name)
			}
		}
	}
	for _, m := range mutations {
		if !applied[m] {
			t.Errorf("mutation %q → %q applies to no catalogued script", m.from, m.to)
		}
	}
}

// TestOtherLibraries: compare-and-delete and compare-and-pexpire scripts as
// other libraries and tutorials write them, sent as a new user would.
func TestOtherLibraries(t *testing.T) {
	c := newTestCatalog(t)
	// Each expected match is named by the sha1 of a catalogued script it
	// must be the same script as (several library bodies share a normal
	// form; which entry's name Match reports does not matter).
	const (
		noMatch   = ""
		cad       = "cf0e94b2e9ffc7e04395cf88f7583fc309985910" // bsm release: if … then return DEL else return 0 end
		cadNoElse = "4dbb87cd80182f627d42cf6042188ecf00a1ff12" // ioredis-lock delifequal: if … then return DEL end return 0
		cape      = "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf" // bsm refresh: if … then return PEXPIRE else return 0 end
		capNoElse = "50f5ab4d38adaf78b662a67356cf1fe302b3e00f" // ioredis-lock pexpireifequal
		setnx     = "862f31bf38e9b63ce28d6e9e5143551bb34ef981" // node-redlock v3 acquire
	)
	for _, tc := range []struct {
		who, body string
		want      string // sha1 of the catalogued script it is, or noMatch
		kind      quorum.Kind
	}{
		{"redis.io SET page", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, cad, quorum.Release},
		{"redis.io distlock page", "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend", cad, quorum.Release},
		{"redis.io twin with pexpire", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`, cape, quorum.Extend},
		{"redlock-py", "\n    if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n        return redis.call(\"del\",KEYS[1])\n    else\n        return 0\n    end", cad, quorum.Release},
		{"redlock-rb", "        if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n          return redis.call(\"del\",KEYS[1])\n        else\n          return 0\n        end\n", cad, quorum.Release},
		{"aioredlock", "\n    if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n        return redis.call(\"DEL\", KEYS[1])\n    else\n        return 0\n    end", cad, quorum.Release},
		{"Java string concat", "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", cad, quorum.Release},
		{"PHP tutorial", "\n                    if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n                        return redis.call(\"DEL\", KEYS[1])\n                    else\n                        return 0\n                    end\n                ", cad, quorum.Release},
		{"node, no else, semicolons", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]); end; return 0;`, cadNoElse, quorum.Release},
		{"Windows editor", "if redis.call('GET', KEYS[1]) == ARGV[1] then\r\n\treturn redis.call('PEXPIRE', KEYS[1], ARGV[2])\r\nend\r\nreturn 0\r\n", capNoElse, quorum.Extend},
		{"pcall style", `if redis.pcall("get", KEYS[1]) == ARGV[1] then return redis.pcall("del", KEYS[1]) else return 0 end`, cad, quorum.Release},
		{"node lock script", `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`, setnx, quorum.Acquire},
		// Not the same script, so not recognized (the client gets -ERR
		// with how to register it):
		{"UNLINK instead of DEL", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("unlink",KEYS[1]) else return 0 end`, noMatch, 0},
		{"EXPIRE takes seconds", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("expire",KEYS[1],ARGV[2]) else return 0 end`, noMatch, 0},
		{"parenthesized condition", `if (redis.call("get", KEYS[1]) == ARGV[1]) then return redis.call("del", KEYS[1]) else return 0 end`, noMatch, 0},
		{"returns true", `if redis.call("get", KEYS[1]) == ARGV[1] then redis.call("del", KEYS[1]) return true end return false`, noMatch, 0},
		{"token in ARGV[2]", `if redis.call("get",KEYS[1]) == ARGV[2] then return redis.call("del",KEYS[1]) else return 0 end`, noMatch, 0},
		{"lower-case options", `return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, noMatch, 0},
	} {
		got := c.Match([]byte(tc.body))
		if tc.want == noMatch {
			if got != nil {
				t.Errorf("%s: matched %s, want no match", tc.who, got.Name)
			}
			continue
		}
		ref := c.BySHA(tc.want)
		if got == nil || Normalize([]byte(got.Body)) != Normalize([]byte(ref.Body)) || !sameVote(got, ref) || got.Kind != tc.kind {
			t.Errorf("%s: got %v, want %s", tc.who, got, ref.Name)
		}
	}
}

// TestNormalizeIdempotent: a normal form is its own normal form.
func TestNormalizeIdempotent(t *testing.T) {
	c := newTestCatalog(t)
	for _, s := range c.Scripts() {
		for _, v := range variants {
			n := Normalize([]byte(v.f(s.Body)))
			if again := Normalize([]byte(n)); again != n {
				t.Errorf("%s, %s: Normalize(%q) = %q", s.Name, v.name, n, again)
			}
		}
	}
}
