package analyze

import (
	"fmt"
	"sort"
	"strings"
)

// finding is the lock a layout's probes point at: which keys, held by which
// token, in which form.
type finding struct {
	keys      []int          // indexes in vals of the lock keys
	token     int            // index in vals of the token; -1 when tokenless
	tok       string         // the token's value (tokenless: the constant written)
	tokArg    Arg            // the token as an argument, stable across layouts
	form      keyType        // 0: any (an unconditional delete)
	tmpl      map[int]*entry // per lock key, the shape of its value (see template); nil for plain
	shape     string         // the shape's name
	embedded  bool           // a string lock whose value contains the token among other text
	tokenless bool
}

var forms = []keyType{typeString, typeHash, typeZSet}

// touched returns the indexes of the arguments an outcome used as keys, in
// order of first use.
func touched(o outcome) []int {
	var out []int
	seen := map[int]bool{}
	for _, c := range o.r.calls {
		spec, ok := commands[c.name]
		if !ok || spec.keys == nil || c.from >= 0 {
			continue
		}
		for _, i := range spec.keys(c.args) {
			if p := o.r.pos(c.args[i]); p >= 0 && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// holds returns the indexes of the arguments that e holds as a lock: a
// string's value (or a part of it), a hash's field, a sorted set's member.
// skip lists arguments that cannot be tokens (keys, the SELECT argument).
func (a *analysis) holds(e *entry, skip map[int]bool) (tokens []int, embedded bool) {
	for i, v := range a.vals {
		if skip[i] || v == "0" {
			continue
		}
		switch e.typ {
		case typeString:
			if e.str == v {
				tokens = append(tokens, i)
			} else if strings.Contains(e.str, v) {
				tokens, embedded = append(tokens, i), true
			}
		case typeHash:
			if _, ok := e.hget(v); ok {
				tokens = append(tokens, i)
			}
		case typeZSet:
			if _, ok := e.zscore(v); ok {
				tokens = append(tokens, i)
			}
		}
	}
	return tokens, embedded
}

// keyProbe is what probing one key alone (the others absent) showed.
type keyProbe struct {
	pos     int
	written *entry // what the all-absent probe left in it
	token   int    // the argument whose holding makes a difference; -1 none, -2 several
	shape   shape  // the shape of the value held by the token
	deletes bool   // every held state, whoever the holder, ends with the key deleted
	renews  bool   // every held state, whoever the holder, ends with the key's expiry re-set
	held    int    // how many states held the key
	errs    int    // how many of them ended in an error
	err     string // the first such error
}

// find probes each key the script touches and decides the lock.
func (a *analysis) find(s0 *obs) (*finding, error) {
	keys := touched(s0.o)
	skip := map[int]bool{}
	if !a.dbArg.IsZero() {
		skip[a.posOf(a.dbArg)] = true
	}
	var probes []*keyProbe
	for i := 0; i < len(keys); i++ {
		for _, k := range keys {
			skip[k] = true
		}
		kp, more, err := a.probeKey(keys[i], s0, skip)
		if err != nil {
			return nil, err
		}
		probes = append(probes, kp)
		for _, k := range more {
			if !contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	f, err := a.pick(probes, s0, skip)
	if err != nil || f != nil {
		return f, err
	}
	if a.hint != nil {
		// The lock found with one KEYS fewer may take in the new last key:
		// probe them together even if no run reached it on its own.
		if last := a.nkeys - 1; !contains(keys, last) {
			keys = append(keys, last)
		}
	}
	if f, err = a.jointSearch(keys, skip); err != nil || f != nil {
		return f, err
	}
	return a.tokenless(probes, s0)
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// shape is a way a lock's value may look: plain (the token is the string,
// the hash field or the sorted-set member) or a template.
type shape struct {
	f        keyType
	tmpl     *entry // nil for plain
	name     string // "" for plain
	embedded bool   // a string that contains the token among other text
}

// probeKey runs the single-key states of key k: held by each candidate
// token, by two other tokens, in each form, re-entered for a hash. A value
// the script JSON-decodes is also tried as a JSON object naming the token.
// It returns the keys those runs touched.
func (a *analysis) probeKey(k int, s0 *obs, skip map[int]bool) (*keyProbe, []int, error) {
	kp := &keyProbe{pos: k, token: -1, written: s0.o.r.db[a.vals[k]], deletes: true, renews: true}
	shapes := []shape{{f: typeString}, {f: typeHash}, {f: typeZSet}}
	var cands []int
	if w := kp.written; w != nil {
		if toks, emb := a.holds(w, skip); len(toks) == 1 {
			cands = toks
			for i := range shapes {
				if shapes[i].f == w.typ {
					shapes[i] = shape{f: w.typ, tmpl: template(w, a.vals[toks[0]], s0.nowMS), name: "as the script writes it", embedded: emb}
				}
			}
		}
	}
	if len(cands) == 0 {
		for i := range a.vals {
			if !skip[i] {
				cands = append(cands, i)
			}
		}
	}
	var more []int
	decoded := false
	for pass := 0; pass < 2; pass++ {
		for _, sh := range shapes {
			m, dec, err := a.probeShape(kp, sh, cands)
			if err != nil {
				return nil, nil, err
			}
			more, decoded = append(more, m...), decoded || dec
		}
		if kp.token != -1 || !decoded || pass == 1 {
			break
		}
		shapes = a.jsonShapes()
	}
	return kp, more, nil
}

// probeShape runs key kp.pos held in one shape by each candidate and by
// two others, and records a token that makes a difference.
func (a *analysis) probeShape(kp *keyProbe, sh shape, cands []int) (more []int, decoded bool, err error) {
	k := kp.pos
	state := func(h holder, t int) probeState {
		s := probeState{keys: []keySpec{{k, h, sh.f}}, token: t, shape: sh.name}
		if sh.tmpl != nil {
			s.tmpl = map[int]*entry{k: sh.tmpl}
		}
		return s
	}
	note := func(o *obs) {
		pre, post := o.o.pre[a.vals[k]], o.o.r.db[a.vals[k]]
		kp.deletes = kp.deletes && post == nil && o.o.err == ""
		kp.renews = kp.renews && post != nil && sameEntry(pre, post, 0) && pre.exp != post.exp
		kp.held++
		if o.o.err != "" {
			if kp.errs++; kp.err == "" {
				kp.err = o.o.err
			}
		}
		more = append(more, touched(o.o)...)
		decoded = decoded || o.o.r.decoded[a.vals[k]]
	}
	others := make([]*obs, 2)
	for j, h := range []holder{byOther, byOther2} {
		if others[j], err = a.probe(state(h, -1)); err != nil {
			return nil, false, err
		}
		note(others[j])
	}
	key := a.vals[k]
	for _, t := range cands {
		o, err := a.probe(state(byCaller, t))
		if err != nil {
			return nil, false, err
		}
		note(o)
		if sig(o, key) == sig(others[0], key) || sig(others[0], key) != sig(others[1], key) {
			continue
		}
		switch {
		case kp.token == -1:
			kp.token, kp.shape = t, sh
		case kp.token != t || kp.shape.f != sh.f:
			kp.token = -2
		}
	}
	return more, decoded, nil
}

// maxJSONShapes bounds the field names tried for a JSON-decoded value.
const maxJSONShapes = 16

// jsonShapes are the JSON values a script may decode to find the holder: a
// JSON string, or an object with the token in a field named by one of the
// script's string constants.
func (a *analysis) jsonShapes() []shape {
	out := []shape{{f: typeString, tmpl: &entry{typ: typeString, str: `"` + tokenMark + `"`}, name: "JSON string", embedded: true}}
	for _, c := range a.consts {
		if len(out) > maxJSONShapes || !isIdent(c) {
			continue
		}
		out = append(out, shape{f: typeString, tmpl: &entry{typ: typeString, str: fmt.Sprintf(`{"%s":"%s"}`, c, tokenMark)},
			name: fmt.Sprintf("JSON object with the token in %q", c), embedded: true})
	}
	return out
}

func isIdent(s string) bool {
	for i, c := range s {
		if !(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')) {
			return false
		}
	}
	return s != ""
}

// sig summarizes an outcome for comparing holders: the reply, whether key k
// was left, deleted or changed, and everything else the run left behind.
func sig(o *obs, k string) string {
	var b strings.Builder
	b.WriteString(o.o.reply.String())
	pre, post := o.o.pre[k], o.o.r.db[k]
	switch {
	case post == nil && pre != nil:
		b.WriteString("|deleted")
	case pre == nil && post != nil, pre != nil && (!sameEntry(pre, post, 0) || pre.exp != post.exp):
		b.WriteString("|changed")
	}
	for _, name := range o.o.r.db.names() {
		if name != k {
			fmt.Fprintf(&b, "|%s=%s", name, entryText(o.o.r.db[name], o.nowMS))
		}
	}
	for _, p := range publications(o.o.r) {
		b.WriteString("|pub " + p)
	}
	return b.String()
}

// entryText renders an entry with its expiry relative to now.
func entryText(e *entry, now int64) string {
	s := fmt.Sprintf("%s:%q:%v:%v:%v", e.typ, e.str, e.hash, e.list, len(e.zset))
	for _, m := range e.zset {
		s += fmt.Sprintf(":%s@%v", m.m, m.s-float64(now))
	}
	if e.exp != 0 {
		s += fmt.Sprintf("~%d", e.exp-now)
	}
	return s
}

// pick decides the lock from the single-key probes: the keys the
// all-absent probe wrote holding a token, and the keys whose holder makes a
// difference, must agree on one token and one form.
func (a *analysis) pick(probes []*keyProbe, s0 *obs, skip map[int]bool) (*finding, error) {
	var f *finding
	add := func(kp *keyProbe, t int, sh shape) error {
		if f == nil {
			f = &finding{token: t, tok: a.vals[t], tokArg: argOf(t, a.nkeys), form: sh.f, tmpl: map[int]*entry{}}
		}
		if f.token != t || f.form != sh.f {
			return &Refusal{Class: ClassBehaviour, Reason: fmt.Sprintf("%s is locked by %s (%s) but %s by %s (%s): one script, several locks",
				posName(f.keys[0], a.nkeys), posName(f.token, a.nkeys), f.form, posName(kp.pos, a.nkeys), posName(t, a.nkeys), sh.f)}
		}
		f.keys = append(f.keys, kp.pos)
		f.embedded = f.embedded || sh.embedded
		if sh.tmpl != nil {
			f.tmpl[kp.pos], f.shape = sh.tmpl, sh.name
		}
		return nil
	}
	for _, kp := range probes {
		if kp.written == nil {
			continue
		}
		toks, embedded := a.holds(kp.written, skip)
		switch {
		case len(toks) > 1:
			return nil, &Refusal{Class: ClassBehaviour, Probe: s0.name, Arg: posName(kp.pos, a.nkeys), Reason: "the key written holds several arguments; none is the token alone"}
		case len(toks) == 1:
			sh := shape{f: kp.written.typ, tmpl: template(kp.written, a.vals[toks[0]], s0.nowMS), name: "as the script writes it", embedded: embedded}
			if err := add(kp, toks[0], sh); err != nil {
				return nil, err
			}
		}
	}
	for _, kp := range probes {
		switch {
		case kp.token == -2:
			return nil, &Refusal{Class: ClassBehaviour, Arg: posName(kp.pos, a.nkeys), Reason: "several arguments act as the token of " + posName(kp.pos, a.nkeys)}
		case kp.token >= 0 && (f == nil || !contains(f.keys, kp.pos)):
			if err := add(kp, kp.token, kp.shape); err != nil {
				return nil, err
			}
		}
	}
	if f != nil {
		sort.Ints(f.keys)
	}
	return f, nil
}
