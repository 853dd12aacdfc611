package catalog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// manifestDir holds the lock clients' scripts, beside the repository in CI
// and on developers' machines; tests that compare with it skip without it,
// the sha1s below are hard-coded so the rest never depends on it.
const manifestDir = "../../../shared/clients/scripts"

func integer(v int64) resp.Reply { return resp.Reply{Type: resp.Integer, Int: v} }

var (
	replyOK  = resp.ReplyOK
	replyNil = resp.ReplyNil
	replyErr = resp.Reply{Type: resp.Error, Str: []byte("ERR something")}
)

// wantBuiltin is what the catalog must say about one library script, and
// replies each kind of master gives it (from reading its Lua), to check
// the vote rule against.
type wantBuiltin struct {
	manifest []string // MANIFEST.json names with this exact body
	sha1     string   // MANIFEST.json sha1
	kind     quorum.Kind
	yes      quorum.VoteRule
	combine  quorum.Combine
	ttlArg   int
	unit     quorum.TTLUnit
	tokenArg int
	noReply  resp.Reply
	nkeys    int // keys the library sends, for YesNumKeys
	yesRs    []resp.Reply
	noRs     []resp.Reply
}

var (
	cadRelease = func(names ...string) wantBuiltin { // compare-and-delete returning DEL's 1 or 0
		return wantBuiltin{manifest: names, kind: quorum.Release, yes: quorum.YesOne, noReply: integer(0),
			nkeys: 1, yesRs: []resp.Reply{integer(1)}, noRs: []resp.Reply{integer(0)}}
	}
	cadExtend = func(unit quorum.TTLUnit, names ...string) wantBuiltin { // compare-and-pexpire returning 1 or 0
		return wantBuiltin{manifest: names, kind: quorum.Extend, yes: quorum.YesOne, ttlArg: 2, unit: unit, tokenArg: 1, noReply: integer(0),
			nkeys: 1, yesRs: []resp.Reply{integer(1)}, noRs: []resp.Reply{integer(0)}}
	}
	setAcquire = func(unit quorum.TTLUnit, names ...string) wantBuiltin { // SET … NX (or force) returning OK or nil
		return wantBuiltin{manifest: names, kind: quorum.Acquire, yes: quorum.YesOK, ttlArg: 2, unit: unit, tokenArg: 1, noReply: replyNil,
			nkeys: 1, yesRs: []resp.Reply{replyOK}, noRs: []resp.Reply{replyNil}}
	}
	redlockMulti = func(kind quorum.Kind, names ...string) wantBuiltin { // node-redlock v4/v5: key counts
		w := wantBuiltin{manifest: names, kind: kind, yes: quorum.YesNumKeys, noReply: integer(0),
			nkeys: 2, yesRs: []resp.Reply{integer(2)}, noRs: []resp.Reply{integer(0), integer(1)}}
		if kind != quorum.Release {
			w.ttlArg, w.unit = 2, quorum.Millis
		}
		if kind == quorum.Acquire || kind == quorum.Extend {
			w.tokenArg = 1
		}
		return w
	}
	withSHA = func(w wantBuiltin, sha string) wantBuiltin { w.sha1 = sha; return w }
)

// wantBuiltins is every script family of ../shared/clients/scripts but
// Redisson's and Spring Integration's, with MANIFEST.json's sha1s.
var wantBuiltins = []wantBuiltin{
	withSHA(cadRelease("redis-py_release"), "c3f8721cbb97f72bc19e972846bd7aaf91901658"),
	withSHA(cadExtend(quorum.Millis, "redis-py_extend"), "a4e8783852e6b949f9ef3a97212805108459a890"),
	withSHA(cadExtend(quorum.Millis, "redis-py_reacquire"), "1cac51482acf5858da00f6d685d68f886cd6b6b2"),
	withSHA(cadRelease("redsync-v4.8_delete"), "00583931c4e4d483f6233879c133c71ed5393f9d"),
	{manifest: []string{"redsync-v4.18_delete"}, sha1: "e950836ed1e694540c503ef9972b8de518044d3b",
		kind: quorum.Release, yes: quorum.YesOne, noReply: integer(0), nkeys: 1,
		yesRs: []resp.Reply{integer(1)}, noRs: []resp.Reply{integer(0), integer(-1)}},
	withSHA(cadExtend(quorum.Millis, "redsync-v4.18_touch", "redsync-v4.8_touch"), "d75bb8b5bd13532ddedd17762e772346e39b321e"),
	withSHA(cadExtend(quorum.Millis, "redsync-v4.18_touchWithSetNX"), "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79"),
	{manifest: []string{"bsm-redislock-v0.9.4_obtain"}, sha1: "80a1b5f2cfccec3b7119ba7721d2127682b691a7",
		kind: quorum.Acquire, yes: quorum.YesOK, ttlArg: 3, unit: quorum.Millis, tokenArg: 1, noReply: replyNil, nkeys: 1,
		yesRs: []resp.Reply{replyOK}, noRs: []resp.Reply{replyNil}},
	withSHA(cadRelease("bsm-redislock_release", "node-redlock-v3_release"), "cf0e94b2e9ffc7e04395cf88f7583fc309985910"),
	withSHA(cadExtend(quorum.Millis, "bsm-redislock_refresh", "node-redlock-v3_extend"), "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf"),
	{manifest: []string{"bsm-redislock_pttl"}, sha1: "6484da7d58920897fdc22b7f9afd1a3d47524ea8",
		kind: quorum.Read, yes: quorum.YesNonNegative, combine: quorum.CombineQthTTL, noReply: integer(-3), nkeys: 1,
		yesRs: []resp.Reply{integer(2000), integer(0)}, noRs: []resp.Reply{integer(-3), integer(-1)}},
	withSHA(cadRelease("ioredis-lock_delifequal"), "4dbb87cd80182f627d42cf6042188ecf00a1ff12"),
	withSHA(cadExtend(quorum.Millis, "ioredis-lock_pexpireifequal"), "50f5ab4d38adaf78b662a67356cf1fe302b3e00f"),
	withSHA(setAcquire(quorum.Millis, "node-redlock-v3_acquire"), "862f31bf38e9b63ce28d6e9e5143551bb34ef981"),
	withSHA(redlockMulti(quorum.Acquire, "node-redlock-v4_acquire"), "e5a322e2634ef59a516e8ea150cb085afafee684"),
	withSHA(redlockMulti(quorum.Extend, "node-redlock-v4_extend"), "ce46f80993d5dac20dd066eb301a4e37994bdbed"),
	withSHA(redlockMulti(quorum.Release, "node-redlock-v4_release"), "0f0f23b9048b36752b5be114f357ba083449f908"),
	withSHA(redlockMulti(quorum.Acquire, "node-redlock-v5_acquire"), "96da70f7716f27d278a5218544df37fd8b0a5e4c"),
	withSHA(redlockMulti(quorum.Extend, "node-redlock-v5_extend"), "aed6f382e410db8ba7926d4e5e9aab410bf2a78a"),
	withSHA(redlockMulti(quorum.Release, "node-redlock-v5_release"), "e4612211c9f8f51c257e26e056b0a654b3187242"),
	{manifest: []string{"python-redis-lock_unlock"}, sha1: "90da91872223f85eb1376a17e3c4df21ace8c54b",
		kind: quorum.Release, yes: quorum.YesZero, noReply: integer(1), nkeys: 2,
		yesRs: []resp.Reply{integer(0)}, noRs: []resp.Reply{integer(1)}},
	{manifest: []string{"python-redis-lock_extend"}, sha1: "fed16109024d968d9496e4140fe1355bac05ebff",
		kind: quorum.Extend, yes: quorum.YesZero, ttlArg: 2, unit: quorum.Seconds, tokenArg: 1, noReply: integer(1), nkeys: 2,
		yesRs: []resp.Reply{integer(0)}, noRs: []resp.Reply{integer(1), integer(2)}},
	{manifest: []string{"python-redis-lock_reset"}, sha1: "afbc8014508f92e446b56567e8ba600e811c1bd5",
		kind: quorum.Release, yes: quorum.YesOne, noReply: integer(0), nkeys: 2,
		yesRs: []resp.Reply{integer(1)}, noRs: []resp.Reply{integer(0)}},
	withSHA(setAcquire(quorum.Millis, "rueidislock_acqms"), "fa3d1aaa7e4145457755016a3d5daf72fa7a11bf"),
	withSHA(setAcquire(quorum.UnixMillis, "rueidislock_acqat"), "3875d208d9e377969d2022550302cc83ad17b584"),
	withSHA(setAcquire(quorum.Millis, "rueidislock_fcqms"), "4384ed08baff4dd7071b6c78c516a2fded4ee3e7"),
	withSHA(setAcquire(quorum.UnixMillis, "rueidislock_fcqat"), "c10e8119872659b926e8e28002d9b7fccbf15617"),
	withSHA(cadRelease("rueidislock_delkey"), "9eb62214c9af87ae5f9a9f12bb4520281c0d2ae1"),
	withSHA(cadExtend(quorum.UnixMillis, "rueidislock_extend"), "852ba6ec6104340ced36643283c856d4698569e4"),
}

func newTestCatalog(t testing.TB, custom ...ScriptConfig) *Catalog {
	t.Helper()
	c, err := New(custom)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuiltins(t *testing.T) {
	c := newTestCatalog(t)
	if got, want := len(c.Scripts()), len(wantBuiltins); got != want {
		t.Errorf("catalog has %d scripts, want %d", got, want)
	}
	for _, w := range wantBuiltins {
		t.Run(w.manifest[0], func(t *testing.T) {
			s := c.BySHA(w.sha1)
			if s == nil {
				t.Fatalf("sha1 %s not catalogued", w.sha1)
			}
			if got := sha1Hex([]byte(s.Body)); got != w.sha1 || s.SHA1 != w.sha1 {
				t.Errorf("embedded body sha1 %s, Script.SHA1 %s, MANIFEST %s", got, s.SHA1, w.sha1)
			}
			if c.Match([]byte(s.Body)) != s {
				t.Errorf("Match of the exact body is not the entry itself")
			}
			if c.BySHA(strings.ToUpper(w.sha1)) != s {
				t.Errorf("BySHA is case-sensitive")
			}
			if s.Kind != w.kind || !s.Yes.Same(&w.yes) || s.Combine != w.combine || s.TTLArg != w.ttlArg ||
				s.TTLUnit != w.unit || s.TokenArg != w.tokenArg || !s.NoReply.Equal(w.noReply) {
				t.Errorf("%s: got kind=%v yes=%+v combine=%d ttl=%d/%d token=%d noreply=%v, want kind=%v yes=%+v combine=%d ttl=%d/%d token=%d noreply=%v",
					s.Name, s.Kind, s.Yes, s.Combine, s.TTLArg, s.TTLUnit, s.TokenArg, s.NoReply,
					w.kind, w.yes, w.combine, w.ttlArg, w.unit, w.tokenArg, w.noReply)
			}
			for _, r := range w.yesRs {
				if !s.Yes.IsYes(&r, w.nkeys) {
					t.Errorf("%s: reply %v should be a yes vote", s.Name, r)
				}
			}
			for _, r := range append(w.noRs, replyErr) {
				if s.Yes.IsYes(&r, w.nkeys) {
					t.Errorf("%s: reply %v should not be a yes vote", s.Name, r)
				}
			}
		})
	}
}

// TestBuiltinInvariants checks what every entry must satisfy whatever its
// library: the fields the engine relies on are consistent with the kind.
func TestBuiltinInvariants(t *testing.T) {
	c := newTestCatalog(t)
	names := map[string]bool{}
	byNorm := map[string]*Script{}
	for _, s := range c.Scripts() {
		if names[s.Name] {
			t.Errorf("name %q twice", s.Name)
		}
		names[s.Name] = true
		switch s.Kind {
		case quorum.Acquire:
			if s.TokenArg == 0 || s.TTLArg == 0 || s.TokenArg == s.TTLArg {
				t.Errorf("%s: acquire needs distinct token and TTL args", s.Name)
			}
			// Every built-in acquire script answers "no" only before it
			// writes anything (compat's TestCatalogRepliesMatchRedis
			// shows the masters left as Redis leaves them).
			if !s.NoIsNoop {
				t.Errorf("%s: built-in acquire without NoIsNoop", s.Name)
			}
		case quorum.Extend:
			// The token tells whose copy a granted extend may shorten
			// afterwards (quorum/shorten.go).
			if s.TTLArg == 0 || s.TokenArg == 0 || s.TokenArg == s.TTLArg || s.NoIsNoop {
				t.Errorf("%s: extend needs distinct TTL and token args", s.Name)
			}
		case quorum.Release, quorum.Read:
			if s.TTLArg != 0 || s.TokenArg != 0 {
				t.Errorf("%s: %v has neither TTL nor token arg", s.Name, s.Kind)
			}
		default:
			t.Errorf("%s: kind %v", s.Name, s.Kind)
		}
		if s.TTLArg != 0 && s.TTLUnit == 0 {
			t.Errorf("%s: TTL without unit", s.Name)
		}
		if s.Yes.IsYes(&s.NoReply, 1) || s.Yes.IsYes(&s.NoReply, 2) {
			t.Errorf("%s: NoReply %v is itself a yes vote", s.Name, s.NoReply)
		}
		// Bodies that normalize equal are one script to Match: they must
		// be voted on alike.
		n := Normalize([]byte(s.Body))
		if n == "" {
			t.Errorf("%s: body does not normalize", s.Name)
		}
		if o := byNorm[n]; o != nil && !sameVote(o, s) {
			t.Errorf("%s and %s normalize equal but vote differently", o.Name, s.Name)
		}
		byNorm[n] = s
	}
}

// TestManifest compares the embedded bodies with the clients' folder, when
// it is there, and checks that no family was left out of wantBuiltins.
func TestManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(manifestDir, "MANIFEST.json"))
	if os.IsNotExist(err) {
		t.Skip("no ", manifestDir, ": compared with the hard-coded sha1s only")
	}
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]struct {
		Bytes int    `json:"bytes"`
		SHA1  string `json:"sha1"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, w := range wantBuiltins {
		for _, m := range w.manifest {
			want[m] = w.sha1
		}
	}
	c := newTestCatalog(t)
	for name, m := range manifest {
		if strings.HasPrefix(name, "redisson-") || strings.HasPrefix(name, "spring-int-") {
			continue // not catalogued yet (a later step)
		}
		if want[name] != m.SHA1 {
			t.Errorf("%s: MANIFEST sha1 %s, test table %q", name, m.SHA1, want[name])
		}
		body, err := os.ReadFile(filepath.Join(manifestDir, name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		s := c.BySHA(m.SHA1)
		if s == nil || s.Body != string(body) || len(body) != m.Bytes {
			t.Errorf("%s: catalogued body differs from %s.lua", name, name)
		}
	}
	for name := range want {
		if _, ok := manifest[name]; !ok {
			t.Errorf("%s: in the test table, not in MANIFEST.json", name)
		}
	}
}

func TestCustomScripts(t *testing.T) {
	release := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('unlink', KEYS[1]) return 1 end return 0"
	acquire := "return redis.call('set', KEYS[1], ARGV[2], 'nx', 'px', ARGV[1])"
	shaOnly := strings.Repeat("AB", 20)
	c := newTestCatalog(t,
		ScriptConfig{Name: "my release", Body: release, Kind: "release", Vote: "one"},
		ScriptConfig{Name: "my acquire", Body: acquire, SHA1: sha1Hex([]byte(acquire)), Kind: "acquire", Vote: "ok",
			TTLArg: 1, TTLUnit: "ms", TokenArg: 2, NoReply: "nil"},
		ScriptConfig{Name: "opaque extend", SHA1: shaOnly, Kind: "extend", Vote: "positive", TTLArg: 2, TTLUnit: "unix_s"},
	)
	all := c.Scripts()
	if len(all) != len(builtins)+3 || all[len(builtins)].Name != "my release" || all[len(all)-1].Name != "opaque extend" {
		t.Fatalf("Scripts() order: builtin first, then custom in config order")
	}
	rel := c.Match([]byte("if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\r\n  redis.call(\"UNLINK\", KEYS[1]);\r\n  return 1\r\nend\r\nreturn 0\r\n"))
	if rel == nil || rel.Name != "my release" || rel.Kind != quorum.Release || !rel.NoReply.Equal(integer(0)) {
		t.Errorf("reformatted custom release: got %+v", rel)
	}
	acq := c.BySHA(sha1Hex([]byte(acquire)))
	if acq == nil || acq.Kind != quorum.Acquire || acq.TTLArg != 1 || acq.TokenArg != 2 || acq.Yes != quorum.YesOK {
		t.Errorf("custom acquire: got %+v", acq)
	}
	ext := c.BySHA(strings.ToLower(shaOnly))
	if ext == nil || ext.Body != "" || ext.SHA1 != strings.ToLower(shaOnly) || ext.TTLUnit != quorum.UnixSecs || !ext.NoReply.Equal(integer(0)) {
		t.Errorf("sha1-only custom extend: got %+v", ext)
	}
	if c.Match(nil) != nil || c.Match([]byte("  -- nothing\n")) != nil {
		t.Errorf("an empty script matched")
	}
}

func TestNewCatalogErrors(t *testing.T) {
	okRelease := ScriptConfig{Name: "my release", Body: "return redis.call('unlink', KEYS[1])", Kind: "release", Vote: "one"}
	with := func(f func(*ScriptConfig)) ScriptConfig { sc := okRelease; f(&sc); return sc }
	acquire := func(f func(*ScriptConfig)) ScriptConfig {
		sc := ScriptConfig{Name: "my acquire", Body: "return redis.call('set', KEYS[1], ARGV[1], 'nx', 'ex', ARGV[2])",
			Kind: "acquire", Vote: "ok", TTLArg: 2, TTLUnit: "s", TokenArg: 1}
		f(&sc)
		return sc
	}
	other := ScriptConfig{Name: "other", Body: "return redis.call('unlink', KEYS[2])", Kind: "release", Vote: "one"}
	for _, tc := range []struct {
		sc   ScriptConfig
		want string
	}{
		{with(func(sc *ScriptConfig) { sc.Kind = "relase" }), `scripts[2] "my release": kind "relase" is not one of acquire, release, extend, read`},
		{with(func(sc *ScriptConfig) { sc.Name = "" }), `scripts[2]: name is required`},
		{with(func(sc *ScriptConfig) { sc.Body = "" }), `scripts[2] "my release": body or sha1 is required`},
		{with(func(sc *ScriptConfig) { sc.Body, sc.SHA1 = "", "abc" }), `sha1 "abc" is not 40 hex digits`},
		{with(func(sc *ScriptConfig) { sc.Body, sc.SHA1 = "", strings.Repeat("g", 40) }), `is not 40 hex digits`},
		{with(func(sc *ScriptConfig) { sc.SHA1 = strings.Repeat("0", 40) }), `sha1 0000000000000000000000000000000000000000 does not match body, whose sha1 is`},
		{with(func(sc *ScriptConfig) { sc.Body = "return 'unfinished" }), `body is not valid Lua: line 1: unfinished string`},
		{with(func(sc *ScriptConfig) { sc.Body = "-- only a comment" }), `body has no Lua code`},
		{with(func(sc *ScriptConfig) { sc.Vote = "yes" }), `vote "yes" is not one of ok, one, true, positive, numkeys, nonnegative, notnil, zero`},
		{with(func(sc *ScriptConfig) { sc.Vote = "zero" }), `vote "zero" needs no_reply`},
		{with(func(sc *ScriptConfig) { sc.NoReply = "none" }), `no_reply "none" is not "nil" or an integer`},
		{with(func(sc *ScriptConfig) { sc.NoReply = "1" }), `no_reply 1 would itself be a yes vote`},
		{with(func(sc *ScriptConfig) { sc.Combine = "max" }), `combine "max" is not one of first, qth_ttl`},
		{with(func(sc *ScriptConfig) { sc.Combine = "qth_ttl" }), `combine "qth_ttl" needs integer TTL replies`},
		{with(func(sc *ScriptConfig) { sc.TTLArg, sc.TTLUnit = 2, "ms" }), `ttl_arg is for acquire and extend scripts, not release`},
		{with(func(sc *ScriptConfig) { sc.TTLUnit = "ms" }), `ttl_unit is set but ttl_arg is not`},
		{with(func(sc *ScriptConfig) { sc.TokenArg = 1 }), `token_arg is for acquire scripts, not release`},
		{with(func(sc *ScriptConfig) { sc.Kind = "extend" }), `kind extend needs ttl_arg`},
		{acquire(func(sc *ScriptConfig) { sc.TokenArg = 0 }), `scripts[2] "my acquire": kind acquire needs token_arg`},
		{acquire(func(sc *ScriptConfig) { sc.TTLArg, sc.TTLUnit = 0, "" }), `kind acquire needs ttl_arg`},
		{acquire(func(sc *ScriptConfig) { sc.TTLUnit = "sec" }), `ttl_unit "sec" is not one of ms, s, unix_ms, unix_s`},
		{acquire(func(sc *ScriptConfig) { sc.TTLArg = -1 }), `ttl_arg -1 is not a 1-based ARGV index`},
		{acquire(func(sc *ScriptConfig) { sc.TokenArg = 2 }), `token_arg and ttl_arg are both ARGV[2]`},
		{acquire(func(sc *ScriptConfig) {
			sc.Body = `if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1) redis.call('pexpire', KEYS[1], ARGV[2]) return 0
end
return redis.call('pttl', KEYS[1])`
			sc.Vote, sc.NoReply, sc.TTLUnit = "zero", "1", "ms"
		}), `kind "acquire" for a re-entrant (hash count) lock: remove the entry`},
		{with(func(sc *ScriptConfig) { sc.Kind, sc.Force = "read", true }), `force is for acquire and release scripts (it marks one that takes or deletes the lock whoever holds it), not read`},
		{with(func(sc *ScriptConfig) { sc.OtherTTLArgs = []TTLArgConfig{{Arg: 0, Unit: "ms"}} }), `other_ttl_args[0]: arg 0 is not a 1-based ARGV index`},
		{with(func(sc *ScriptConfig) { sc.OtherTTLArgs = []TTLArgConfig{{Arg: 2, Unit: "min"}} }), `other_ttl_args[0]: unit "min" is not one of ms, s, unix_ms, unix_s`},
		{acquire(func(sc *ScriptConfig) { sc.OtherTTLArgs = []TTLArgConfig{{Arg: 3, Unit: "ms"}, {Arg: 2, Unit: "s"}} }), `other_ttl_args[1]: ARGV[2] is already ttl_arg, token_arg or an earlier entry`},
		{with(func(sc *ScriptConfig) { sc.Name = "other" }), `scripts[2] "other": name is already used by scripts[1] "other"`},
		{with(func(sc *ScriptConfig) { sc.Name = "redis-py release" }), `name is already used by builtin "redis-py release"`},
		{with(func(sc *ScriptConfig) { sc.Body = other.Body }), `sha1 ` + sha1Hex([]byte(other.Body)) + ` is already scripts[1] "other"`},
		{with(func(sc *ScriptConfig) { sc.Body = "return redis.call(\"UNLINK\", KEYS[2]);" }), `the same script as scripts[1] "other"`},
		{with(func(sc *ScriptConfig) { sc.Body, sc.SHA1 = "", "CF0E94B2E9FFC7E04395CF88F7583FC309985910" }),
			`scripts[2] "my release": sha1 cf0e94b2e9ffc7e04395cf88f7583fc309985910 is already builtin "bsm-redislock release (node-redlock v3 release)"; remove this entry`},
		// The redis.io compare-and-delete is bsm's release up to spacing.
		{with(func(sc *ScriptConfig) {
			sc.Body = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
		}), `scripts[2] "my release": body is, up to comments, whitespace, quotes and command-name case, the same script as builtin`},
	} {
		_, err := New([]ScriptConfig{okRelease2(), other, tc.sc})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got error %v, want one containing %q", err, tc.want)
		}
	}
	if _, err := New([]ScriptConfig{okRelease2(), other, okRelease}); err != nil {
		t.Errorf("valid entries: %v", err)
	}
}

// okRelease2 is a valid first entry, so that errors name index 2.
func okRelease2() ScriptConfig {
	return ScriptConfig{Name: "first", Body: "return redis.call('unlink', KEYS[3])", Kind: "release", Vote: "positive"}
}

// TestMatchAllocs: recognizing a script, exact or reformatted, allocates
// nothing; EVAL of a catalogued script is on every request's path.
func TestMatchAllocs(t *testing.T) {
	c := newTestCatalog(t)
	exact := []byte(c.BySHA("e950836ed1e694540c503ef9972b8de518044d3b").Body)
	reformatted := []byte(strings.ReplaceAll(strings.ReplaceAll(string(exact), "\n", "\r\n"), "\t", "  "))
	for name, body := range map[string][]byte{"exact": exact, "reformatted": reformatted} {
		if c.Match(body) == nil {
			t.Fatalf("%s: no match", name)
		}
		if n := testing.AllocsPerRun(100, func() { c.Match(body) }); n != 0 {
			t.Errorf("%s: Match allocates %.1f times", name, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.BySHA("E950836ED1E694540C503EF9972B8DE518044D3B") }); n != 0 {
		t.Errorf("BySHA allocates %.1f times", n)
	}
}

func BenchmarkMatch(b *testing.B) {
	c := newTestCatalog(b)
	exact := []byte(c.BySHA("a4e8783852e6b949f9ef3a97212805108459a890").Body) // redis-py extend, the longest
	reformatted := []byte(strings.ReplaceAll(string(exact), "'", "\""))
	for _, bc := range []struct {
		name string
		body []byte
	}{{"exact", exact}, {"reformatted", reformatted}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if c.Match(bc.body) == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}
