package analyze

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// The model's two clocks, in unix microseconds: a day and a bit apart, with
// sub-second parts, so that anything derived from TIME differs between them.
const (
	clockA  = 1_700_000_000_123_456
	clockB  = clockA + 86_401_111_111
	deltaMS = clockB/1000 - clockA/1000
)

// Tokens of other clients in probe states: not arguments, numbers like the
// arguments (a script parsing its token parses these too), and differing
// from every argument from the first byte on, as random tokens do, so that
// a script comparing a prefix of the token (bsm/redislock) tells them apart.
const (
	otherToken  = "2899999999999"
	otherToken2 = "3899999999999"
)

// Other holders' tokens that are no numbers, as real tokens are not: the
// words tried as the caller's token (content.go) also run against these,
// for a script that compares tokens through tonumber, which gives nil for
// every word, so that nil == nil takes or deletes anyone's lock.
const (
	otherWord  = "Q899999999999"
	otherWord2 = "R899999999999"
)

// otherTokens are the tokens of other holders in the probe states.
func (a *analysis) otherTokens() (string, string) {
	if a.wordOthers {
		return otherWord, otherWord2
	}
	return otherToken, otherToken2
}

// heldPTTL is the remaining TTL of the i-th held key of a probe state:
// distinct per key (to tell a minimum from a particular key) and from every
// argument (to tell a TTL that was kept from one that was set).
func heldPTTL(i int) int64 { return 7_000_003 + int64(i)*1_000_003 }

// longHeldBase is the held keys' remaining TTL in the second analysis of
// a script guarded by the lock's remaining TTL (longheld.go): above every
// argument's probe value read as ms, and as seconds too (TTL rounds it to
// 2e12 s), below 2^53 so that Lua's numbers hold it exactly.
const longHeldBase = 2_000_000_000_000_003

// heldPTTL is heldPTTL, or above every argument in the long-held analysis.
func (a *analysis) heldPTTL(i int) int64 {
	if a.longHeld {
		return longHeldBase + int64(i)*1_000_003
	}
	return heldPTTL(i)
}

// argValue is the probe value of argument i (KEYS first, then ARGV): every
// argument is a distinct number, so that any of them can serve as a key, a
// token, a count or a TTL in any unit, and the effects tell which it was.
// Read as an absolute time it lies after both clocks; read as a relative
// one it is far from every other.
func argValue(i int) string { return formatInt(1_800_000_000_000 + int64(i+1)*10_000_019) }

// holder is who holds a lock key in a probe state.
type holder uint8

const (
	absent    holder = iota
	byCaller         // the caller's token
	byOther          // another client's token
	byOther2         // a third client's token
	reentered        // the caller's token, hash count 2
	// shared: a hash with the caller's token and another's, count 1 each.
	// No exclusive lock leaves two holders in one hash, but a script that
	// does otherwise there (a branch on HLEN) would do it on a master where
	// another script of the same key left a second field: the script must
	// do there what it does held by the caller alone.
	shared
)

// keySpec is one key's state in a probe.
type keySpec struct {
	pos int // index in vals
	h   holder
	f   keyType
}

// probeState is a keyspace to run the script on, described by who holds
// which key; keys not listed are absent.
type probeState struct {
	keys  []keySpec
	token int            // index in vals of the caller's token; -1 for none
	tok   string         // the caller's token value when token is -1 (tokenless)
	tmpl  map[int]*entry // per key, the shape of a held value (see template); nil for the plain one
	shape string         // names the shapes in tmpl, for the probe's name
	// aux, when set, is a key other than the lock's holding a value the
	// script writes there, or one of its constants (a latch's "1").
	aux    int
	auxVal *entry
	auxDes string // describes auxVal in the probe's name
	// pttl, when set, is every held lock key's remaining TTL in ms, in
	// place of heldPTTL's (heldttl.go).
	pttl int64
}

// tokenMark stands for the holder's token in a template.
const tokenMark = "\x00token\x00"

// template is an entry as the script writes it (what its own acquisition
// left, or a JSON object naming the token), with the token replaced by
// tokenMark and scores relative to the clock.
func template(e *entry, token string, nowMS int64) *entry {
	t := e.clone()
	t.str = strings.ReplaceAll(t.str, token, tokenMark)
	for i := range t.hash {
		if t.hash[i].f == token {
			t.hash[i].f = tokenMark
		}
	}
	for i := range t.zset {
		if t.zset[i].m == token {
			t.zset[i].m = tokenMark
		}
		t.zset[i].s -= float64(nowMS)
	}
	return t
}

func (a *analysis) stateName(s probeState) string {
	if len(s.keys) == 0 {
		return "all keys absent"
	}
	parts := make([]string, len(s.keys), len(s.keys)+1)
	for i, k := range s.keys {
		name := posName(k.pos, a.nkeys)
		switch k.h {
		case absent:
			parts[i] = name + " absent"
		case byCaller:
			parts[i] = fmt.Sprintf("%s held by the caller's token %s (%s)", name, a.tokenName(s), k.f)
		case byOther:
			parts[i] = fmt.Sprintf("%s held by another token (%s)", name, k.f)
		case byOther2:
			parts[i] = fmt.Sprintf("%s held by a third token (%s)", name, k.f)
		case reentered:
			parts[i] = fmt.Sprintf("%s re-entered by the caller's token %s (hash count 2)", name, a.tokenName(s))
		case shared:
			parts[i] = fmt.Sprintf("%s held by the caller's token %s and another token (hash, count 1 each)", name, a.tokenName(s))
		}
	}
	if s.shape != "" {
		parts = append(parts, s.shape)
	}
	if s.auxVal != nil {
		parts = append(parts, fmt.Sprintf("%s holding %s", posName(s.aux, a.nkeys), s.auxDes))
	}
	if s.pttl > 0 {
		parts = append(parts, fmt.Sprintf("held keys with %dms left", s.pttl))
	}
	return strings.Join(parts, ", ")
}

func (a *analysis) tokenName(s probeState) string {
	if s.token < 0 {
		return fmt.Sprintf("%q", s.tok)
	}
	return posName(s.token, a.nkeys)
}

func (a *analysis) tokenValue(s probeState) string {
	if s.token < 0 {
		return s.tok
	}
	return a.vals[s.token]
}

// db builds the state's keyspace for a clock.
func (a *analysis) db(s probeState, nowMS int64) keyspace {
	ks := keyspace{}
	if s.auxVal != nil {
		e := fromTemplate(s.auxVal, "", nowMS)
		e.exp = nowMS + a.heldPTTL(maxLockKeys)
		ks[a.vals[s.aux]] = e
	}
	for i, k := range s.keys {
		if k.h == absent {
			continue
		}
		hv := a.tokenValue(s)
		other, other2 := a.otherTokens()
		switch k.h {
		case byOther:
			hv = other
		case byOther2:
			hv = other2
		}
		exp := nowMS + a.heldPTTL(i)
		if s.pttl > 0 {
			exp = nowMS + s.pttl
		}
		var e *entry
		if t := s.tmpl[k.pos]; t != nil && t.typ == k.f {
			e = fromTemplate(t, hv, nowMS)
		} else {
			e = &entry{typ: k.f}
			switch k.f {
			case typeString:
				e.str = hv
			case typeHash:
				e.hash = []field{{hv, "1"}}
			case typeZSet:
				e.zset = []member{{hv, float64(exp)}}
			}
		}
		if k.h == reentered {
			for j := range e.hash {
				if e.hash[j].f == hv {
					e.hash[j].v = "2"
				}
			}
		}
		if k.h == shared && e.typ == typeHash {
			e.hash = append(e.hash, field{other, "1"})
		}
		e.exp = exp
		ks[a.vals[k.pos]] = e
	}
	return ks
}

// fromTemplate fills a template with holder token hv at the clock now.
func fromTemplate(t *entry, hv string, now int64) *entry {
	e := t.clone()
	e.str = strings.ReplaceAll(e.str, tokenMark, hv)
	for i := range e.hash {
		if e.hash[i].f == tokenMark {
			e.hash[i].f = hv
		}
	}
	for i := range e.zset {
		if e.zset[i].m == tokenMark {
			e.zset[i].m = hv
		}
		e.zset[i].s += float64(now)
	}
	return e
}

// obs is the outcome of one probe, run twice under each clock.
type obs struct {
	name  string
	s     probeState
	o     outcome // under clock A
	nowMS int64
	// moved says, per key, whether its expiry moved with the clock (a TTL
	// relative to now) rather than staying (an absolute one).
	moved map[string]bool
}

// errRestart asks for the layout to be analyzed again: a run read KEYS or
// ARGV beyond their end, or passed an argument to SELECT.
type errRestart struct{}

func (errRestart) Error() string { return "restart" }

// probe runs state s twice under each clock and checks that the two runs
// agree exactly and the two clocks differ only in expiries and scores that
// moved exactly with the clock.
func (a *analysis) probe(s probeState) (*obs, error) {
	return a.probeClocks(s, []int64{clockA, clockA, clockB, clockB})
}

// probeOnce runs state s once under each clock: for the alternatives,
// whose determinism the same states with the probe values have shown.
func (a *analysis) probeOnce(s probeState) (*obs, error) {
	return a.probeClocks(s, []int64{clockA, clockB})
}

// probeClocks runs state s once per clock given: two runs per clock are
// compared with each other, and the first of each clock across clocks.
func (a *analysis) probeClocks(s probeState, clocks []int64) (*obs, error) {
	name := a.stateName(s)
	if o := a.cache[name]; o != nil {
		return o, nil
	}
	ob, err := a.runProbe(name, s, clocks, nil)
	if err != nil {
		return nil, err
	}
	a.cache[name] = ob
	return ob, nil
}

// runProbe runs state s once per clock, uncached; bump, when set, adds to
// the value each named counter holds before the script increments it
// (counterdiff.go).
func (a *analysis) runProbe(name string, s probeState, clocks []int64, bump map[string]int64) (*obs, error) {
	outs := make([]outcome, len(clocks))
	for i, clock := range clocks {
		var once map[string]int64 // each run bumps each counter once
		if bump != nil {
			once = maps.Clone(bump)
		}
		r := &run{probe: name, db: a.db(s, clock/1000), nowUS: clock, vals: a.vals, nkeys: a.nkeys, b: a.b, dbArg: -1, bump: once}
		o, ref := a.v.exec(r)
		a.runs++
		if ref != nil {
			return nil, ref
		}
		for _, c := range r.calls {
			switch c.name {
			case "pttl", "ttl", "pexpiretime", "expiretime":
				a.readsTTL = true
			}
		}
		if r.keysMiss > a.nkeys || r.argvMiss > a.nargs || r.dbArg >= 0 {
			a.grow(r)
			return nil, errRestart{}
		}
		outs[i] = o
	}
	if ref := a.v.checkFrozen(); ref != nil {
		ref.Probe = name
		return nil, ref
	}
	half := len(outs) / 2
	for i := 0; i+1 < len(outs) && half == 2; i += 2 {
		if d := sameRun(outs[i], outs[i+1]); d != "" {
			return nil, &Refusal{Class: ClassNondeterministic, Probe: name, Reason: "two identical runs differ: " + d}
		}
	}
	ob := &obs{name: name, s: s, o: outs[0], nowMS: clockA / 1000, moved: map[string]bool{}}
	if ref := clockDiff(outs[0], outs[half], ob.moved); ref != nil {
		ref.Probe = name
		return nil, ref
	}
	return ob, nil
}

// grow records what a run asked for beyond the layout.
func (a *analysis) grow(r *run) {
	a.nkeys = max(a.nkeys, r.keysMiss)
	a.nargs = max(a.nargs, r.argvMiss)
	if r.dbArg >= 0 {
		a.dbArg = argOf(r.dbArg, r.nkeys)
	}
}

// sameRun compares two runs of the same probe under the same clock.
func sameRun(x, y outcome) string {
	switch {
	case !x.reply.Equal(y.reply):
		return fmt.Sprintf("run 1 replied %s, run 2 %s", x.reply, y.reply)
	case len(x.r.calls) != len(y.r.calls):
		return fmt.Sprintf("run 1 made %d commands, run 2 %d", len(x.r.calls), len(y.r.calls))
	}
	for i, c := range x.r.calls {
		if d := y.r.calls[i]; strings.Join(c.args, "\x00") != strings.Join(d.args, "\x00") {
			return fmt.Sprintf("command %d differs (%s, then %s)", i+1, x.r.callText(c.args), y.r.callText(d.args))
		}
	}
	for _, k := range unionKeys(x.r.db, y.r.db) {
		if !sameEntry(x.r.db[k], y.r.db[k], 0) {
			return fmt.Sprintf("key %s ends differently", x.r.argName(k))
		}
	}
	return ""
}

// clockDiff compares the runs under clock A and clock B. Replies,
// publications and values must be equal; an expiry or a score may move by
// exactly the clocks' difference (relative to now) or not at all.
func clockDiff(x, y outcome, moved map[string]bool) *Refusal {
	clock := func(what string) *Refusal {
		return &Refusal{Class: ClassClock, Reason: what + " depends on the clock otherwise than as an expiry relative to now (probed with two clocks)"}
	}
	if !x.reply.Equal(y.reply) {
		return clock(fmt.Sprintf("the reply (%s, then %s)", x.reply, y.reply))
	}
	px, py := publications(x.r), publications(y.r)
	if strings.Join(px, "\x00") != strings.Join(py, "\x00") {
		return clock("a publication")
	}
	for _, k := range unionKeys(x.r.db, y.r.db) {
		ex, ey := x.r.db[k], y.r.db[k]
		if !sameEntry(ex, ey, deltaMS) {
			return clock("the content of key " + x.r.argName(k))
		}
		if ex != nil && ex.exp != ey.exp {
			if ey.exp-ex.exp != deltaMS {
				return clock("the expiry of key " + x.r.argName(k))
			}
			moved[k] = true
		}
	}
	return nil
}

func publications(r *run) []string {
	var out []string
	for _, c := range r.calls {
		if c.name == "publish" || c.name == "spublish" {
			out = append(out, strings.Join(c.args[1:], "\x00"))
		}
	}
	return out
}

func unionKeys(x, y keyspace) []string {
	seen := map[string]bool{}
	for k := range x {
		seen[k] = true
	}
	for k := range y {
		seen[k] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sameEntry compares two entries, expiry aside; sorted-set scores may
// differ by 0 or shift.
func sameEntry(x, y *entry, shift int64) bool {
	if x == nil || y == nil {
		return x == y
	}
	if x.typ != y.typ || x.str != y.str || len(x.hash) != len(y.hash) || len(x.zset) != len(y.zset) || len(x.list) != len(y.list) {
		return false
	}
	for i := range x.hash {
		if x.hash[i] != y.hash[i] {
			return false
		}
	}
	for i := range x.list {
		if x.list[i] != y.list[i] {
			return false
		}
	}
	for i := range x.zset {
		d := y.zset[i].s - x.zset[i].s
		if x.zset[i].m != y.zset[i].m || (d != 0 && d != float64(shift)) {
			return false
		}
	}
	return true
}
