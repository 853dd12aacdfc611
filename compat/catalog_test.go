package compat

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// rawConn is a client that sends commands and returns the reply's exact
// bytes, so replies can be compared type for type.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) do(args ...string) string {
	rc.t.Helper()
	rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		rc.t.Fatal(err)
	}
	v, err := readRaw(rc.r)
	if err != nil {
		rc.t.Fatalf("%s: %v", args[0], err)
	}
	return v
}

// scriptCase is one state of a script's keys before it runs, and its
// arguments. In argv, "$TOK" is the caller's token, "$TTL" the TTL in ms,
// "$AT" an absolute unix ms deadline; in state, each key's value ("" =
// missing); a value ending in "!" is set without expiry. keepsTTL marks a
// case where Redis lowers the TTL of a copy the caller's token held (to
// $TTL, below the state's 5 s) and lockproxy by design does not: an
// acquire never lowers the TTL of a copy the token held, and a grant over
// several keys is not shortened (docs/analyzer.md, "Checked on the
// masters"). There the masters may keep up to the state's TTL.
type scriptCase struct {
	state    []string
	argv     []string
	keepsTTL bool
}

// states for one-key scripts whose token is ARGV[1].
var (
	missing = []string{""}
	ours    = []string{"tok"}
	theirs  = []string{"other"}
)

func oneKey(argv ...string) []scriptCase {
	return []scriptCase{{state: missing, argv: argv}, {state: ours, argv: argv}, {state: theirs, argv: argv}}
}

// multiKey: node-redlock's multi-resource scripts over 3 keys.
func multiKey(argv ...string) []scriptCase {
	var out []scriptCase
	for _, st := range [][]string{
		{"", "", ""}, {"tok", "tok", "tok"}, {"tok", "", "tok"}, {"tok", "other", "tok"}, {"", "", "other"},
	} {
		out = append(out, scriptCase{state: st, argv: argv})
	}
	return out
}

// keepingTTL marks cases[i] keepsTTL.
func keepingTTL(cases []scriptCase, i int) []scriptCase {
	cases[i].keepsTTL = true
	return cases
}

// replyCases says, per catalogued script (by name), what to run it on.
// Every catalogued script must have an entry: TestCatalogRepliesMatchRedis
// fails on one without.
var replyCases = map[string][]scriptCase{
	"redis-py release":     oneKey("$TOK"),
	"redis-py extend":      append(oneKey("$TOK", "$TTL", "0"), oneKey("$TOK", "$TTL", "1")...),
	"redis-py reacquire":   oneKey("$TOK", "$TTL"),
	"redsync v4.8 delete":  oneKey("$TOK"),
	"redsync v4.18 delete": oneKey("$TOK"),
	"redsync v4 touch":     oneKey("$TOK", "$TTL"),
	"bsm-redislock release (node-redlock v3 release)": oneKey("$TOK"),
	"bsm-redislock refresh (node-redlock v3 extend)":  oneKey("$TOK", "$TTL"),
	"bsm-redislock pttl":                              oneKey("$TOK"),
	"ioredis-lock delifequal":                         oneKey("$TOK"),
	"ioredis-lock pexpireifequal":                     oneKey("$TOK", "$TTL"),
	"node-redlock v3 acquire":                         oneKey("$TOK", "$TTL"),
	"redsync v4.18 touchWithSetNX":                    oneKey("$TOK", "$TTL"),
	"rueidislock acqms":                               oneKey("$TOK", "$TTL"),
	"rueidislock acqat":                               oneKey("$TOK", "$AT"),
	"rueidislock fcqms":                               keepingTTL(oneKey("$TOK", "$TTL"), 1),
	"rueidislock fcqat":                               oneKey("$TOK", "$AT"),
	"rueidislock delkey":                              oneKey("$TOK"),
	"rueidislock extend":                              oneKey("$TOK", "$AT"),
	// bsm obtain: ARGV[1] is token+metadata, ARGV[2] the token's length;
	// "tokold" is the same token with other metadata (re-obtain).
	"bsm-redislock v0.9 obtain": {
		{state: missing, argv: []string{"tokmeta", "3", "$TTL"}},
		{state: []string{"tokold"}, argv: []string{"tokmeta", "3", "$TTL"}, keepsTTL: true},
		{state: theirs, argv: []string{"tokmeta", "3", "$TTL"}},
	},
	"node-redlock v4 acquire": multiKey("$TOK", "$TTL"),
	"node-redlock v4 extend":  keepingTTL(multiKey("$TOK", "$TTL"), 1),
	"node-redlock v4 release": multiKey("$TOK"),
	"node-redlock v5 acquire": multiKey("$TOK", "$TTL"),
	"node-redlock v5 extend":  keepingTTL(multiKey("$TOK", "$TTL"), 1),
	"node-redlock v5 release": multiKey("$TOK"),
	// python-redis-lock: KEYS[2] is the signal list; unlock and reset
	// take its expiry in ms in ARGV[2], extend the new TTL in seconds.
	"python-redis-lock unlock": {
		{state: []string{"", ""}, argv: []string{"$TOK", "1000"}},
		{state: []string{"tok", ""}, argv: []string{"$TOK", "1000"}},
		{state: []string{"other", ""}, argv: []string{"$TOK", "1000"}},
	},
	"python-redis-lock extend": {
		{state: []string{"", ""}, argv: []string{"$TOK", "30"}},
		{state: []string{"tok", ""}, argv: []string{"$TOK", "30"}},
		{state: []string{"tok!", ""}, argv: []string{"$TOK", "30"}},
		{state: []string{"other", ""}, argv: []string{"$TOK", "30"}},
	},
	"python-redis-lock reset": {
		{state: []string{"", ""}, argv: []string{"$TOK", "1000"}},
		{state: []string{"tok", ""}, argv: []string{"$TOK", "1000"}},
		{state: []string{"other", ""}, argv: []string{"$TOK", "1000"}},
	},
}

// TestCatalogRepliesMatchRedis runs every catalogued script, in each state
// of its keys that changes its answer, on one real redis-server and through
// lockproxy on the 5 masters holding the same state, in RESP2 and RESP3.
// The client must get the very bytes Redis gives (remaining-TTL reads: the
// same type, at most the drift lower), and every master must end in the
// state the single server ends in. EVALSHA and EVAL alternate, so every
// catalogued sha1 is shown to answer EVALSHA with no EVAL before it.
func TestCatalogRepliesMatchRedis(t *testing.T) {
	t.Parallel()
	e := setup(t)
	single := redisproc.ForTest(t, 1)[0]
	cat, err := catalog.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	prefix := prefixOf(t)
	n := 0
	for _, proto := range []string{"2", "3"} {
		direct, through := dialRaw(t, single.Addr), dialRaw(t, e.addr)
		if proto == "3" {
			direct.do("HELLO", "3")
			through.do("HELLO", "3")
		}
		for _, s := range cat.Scripts() {
			cases, ok := replyCases[s.Name]
			if !ok {
				t.Errorf("catalogued script %q has no case in replyCases: add the states that change its reply", s.Name)
				continue
			}
			for i, sc := range cases {
				n++
				what := fmt.Sprintf("RESP%s %s, case %d %q %q", proto, s.Name, i, sc.state, sc.argv)
				keys := make([]string, len(sc.state))
				for k := range keys {
					keys[k] = fmt.Sprintf("%scase%d:k%d", prefix, n, k)
				}
				setState(t, e, single, keys, sc.state)
				argv := make([]string, len(sc.argv))
				// 20 s: a master's copy of an absolute expiry must outlast
				// it less the drift allowance (2ms + 1%) counted from the
				// command's arrival, so the allowance must cover how late
				// a loaded machine runs it (3 s left 32 ms: CI refused).
				at := strconv.FormatInt(time.Now().Add(20*time.Second).UnixMilli(), 10)
				for j, a := range sc.argv {
					argv[j] = strings.NewReplacer("$TOK", "tok", "$TTL", "3000", "$AT", at).Replace(a)
				}
				cmd := append(append([]string{"EVAL", s.Body, strconv.Itoa(len(keys))}, keys...), argv...)
				want := direct.do(cmd...)
				if n%2 == 0 {
					cmd[0], cmd[1] = "EVALSHA", s.SHA1
				}
				got := through.do(cmd...)
				if err := sameReply(s, want, got); err != nil {
					t.Errorf("%s: %v", what, err)
				}
				for _, k := range keys {
					if err := sameState(t, e, single, k, sc.keepsTTL); err != nil {
						t.Errorf("%s: after it, %v", what, err)
					}
				}
			}
		}
	}
	// No case may have left the test's keys anywhere but where Redis did:
	// delete them and check the masters hold nothing else under the prefix.
	for i := range e.masters {
		for _, ks := range e.keys(t, prefix) {
			if len(ks) > 0 {
				e.do(t, i, append([]string{"DEL"}, ks...)...)
			}
		}
	}
	must(t, e.checkKeys(t, prefix))
}

// setState puts the same keys in the same state on the single server and
// on every master, with a 5s TTL unless the value ends in "!".
func setState(t *testing.T, e *env, single *redisproc.Server, keys, state []string) {
	t.Helper()
	all := append([]*redisproc.Server{single}, e.masters...)
	for _, srv := range all {
		for k, key := range keys {
			args := []string{"DEL", key}
			if v := state[k]; strings.HasSuffix(v, "!") {
				args = []string{"SET", key, strings.TrimSuffix(v, "!")}
			} else if v != "" {
				args = []string{"SET", key, v, "PX", "5000"}
			}
			if _, err := srv.Do(args...); err != nil {
				t.Fatalf("%s on %s: %v", strings.Join(args, " "), srv.Addr, err)
			}
		}
	}
}

// sameReply compares lockproxy's reply with Redis's, byte for byte except
// for remaining-TTL reads, where lockproxy answers the quorum's
// conservative figure: the Q-th largest PTTL minus the drift.
func sameReply(s *catalog.Script, want, got string) error {
	if s.Combine == quorum.CombineQthTTL && strings.HasPrefix(want, ":") && !strings.HasPrefix(want, ":-") {
		w, _ := strconv.ParseInt(strings.TrimSpace(want[1:]), 10, 64)
		g, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(got, ":")), 10, 64)
		if !strings.HasPrefix(got, ":") || err != nil || g > w || g < w-250 {
			return fmt.Errorf("lockproxy answered %q, Redis %q: want an integer at most 250ms below", got, want)
		}
		return nil
	}
	if got != want {
		return fmt.Errorf("lockproxy answered %q, Redis %q", got, want)
	}
	return nil
}

// stateOf describes key on srv: its type, contents and PTTL.
func stateOf(t *testing.T, srv *redisproc.Server, key string) (desc string, pttl int64) {
	t.Helper()
	do := func(args ...string) string {
		v, err := srv.Do(args...)
		if err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(args, " "), srv.Addr, err)
		}
		return v
	}
	typ := do("TYPE", key)
	switch typ {
	case "string":
		desc = "string " + strconv.Quote(do("GET", key))
	case "list":
		desc = "list " + strconv.Quote(do("LRANGE", key, "0", "-1"))
	default:
		desc = typ
	}
	pttl, _ = strconv.ParseInt(do("PTTL", key), 10, 64)
	return desc, pttl
}

// sameState: every master holds key as the single server does, with a
// PTTL within 250ms of it (or the same -1/-2); with keepsTTL, anywhere
// from Redis's to the state's 5 s.
func sameState(t *testing.T, e *env, single *redisproc.Server, key string, keepsTTL bool) error {
	t.Helper()
	want, wantTTL := stateOf(t, single, key)
	read := time.Now()
	ok := func() error {
		// Redis's PTTL was read once, at read: a master's copy looked at
		// later has aged by at least as long (a late master on a loaded
		// machine), so both bounds move down with that age, and waiting
		// cannot pass a master that keeps a longer TTL than Redis.
		aged := time.Since(read).Milliseconds()
		hi := wantTTL + 250 - aged
		if keepsTTL {
			hi = 5250
		}
		for i, m := range e.masters {
			got, ttl := stateOf(t, m, key)
			switch {
			case ttl == -2 && wantTTL >= 0 && wantTTL-aged <= 250:
				continue // Redis's copy has expired by now as well
			case wantTTL < 0 || ttl < 0:
				if got == want && ttl == wantTTL {
					continue
				}
			case got == want && ttl >= wantTTL-250-aged && ttl <= hi:
				continue
			}
			return fmt.Errorf("master %d holds %s %s (PTTL %d), Redis %s (PTTL %d, %d ms before): want its value and a PTTL from %d to %d", i, key, got, ttl, want, wantTTL, aged, wantTTL-250-aged, hi)
		}
		return nil
	}
	var err error
	poll(func() bool { err = ok(); return err == nil })
	return err
}

// TestCatalogSHA1sAnswerEVALSHA: a client that never sent EVAL (or
// SCRIPT LOAD) finds every catalogued sha1 with SCRIPT EXISTS, and a
// reformatted body answers EVALSHA under its own sha1 after one EVAL.
func TestCatalogSHA1sAnswerEVALSHA(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cat, err := catalog.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, e.addr)
	args := []string{"SCRIPT", "EXISTS"}
	for _, s := range cat.Scripts() {
		args = append(args, s.SHA1)
	}
	want := fmt.Sprintf("*%d\r\n%s", len(args)-2, strings.Repeat(":1\r\n", len(args)-2))
	if got := rc.do(args...); got != want {
		t.Fatalf("SCRIPT EXISTS of the catalog = %q, want all 1", got)
	}
	key := prefixOf(t) + "lock"
	// A comment unique to this run: the proxy is shared by the package's
	// tests (and by -count repetitions), and remembers sha1s it has seen.
	body := fmt.Sprintf("-- my team's copy, run %d\n", time.Now().UnixNano()) + "if redis.call('GET', KEYS[1]) == ARGV[1] then\r\n  return redis.call('DEL', KEYS[1])\r\nelse\r\n  return 0\r\nend\r\n"
	sum := sha1.Sum([]byte(body))
	sha := hex.EncodeToString(sum[:])
	if got := rc.do("EVALSHA", sha, "1", key, "tok"); !strings.HasPrefix(got, "-NOSCRIPT") {
		t.Fatalf("EVALSHA of a reformatted body before EVAL = %q, want NOSCRIPT (as Redis)", got)
	}
	if got := rc.do("EVAL", body, "1", key, "tok"); got != ":0\r\n" {
		t.Fatalf("EVAL of a reformatted compare-and-delete = %q, want :0", got)
	}
	if got := rc.do("EVALSHA", sha, "1", key, "tok"); got != ":0\r\n" {
		t.Fatalf("EVALSHA of it after EVAL = %q, want :0", got)
	}
}
