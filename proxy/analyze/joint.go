package analyze

import (
	"fmt"
	"strings"
)

// jointSig summarizes what a run did: its reply, every key it changed and
// how, its publications. Keys left as they were do not count, so that
// states differing only in who holds an untouched key compare equal.
func jointSig(o *obs) string {
	var b strings.Builder
	b.WriteString(o.o.reply.String())
	for _, name := range unionKeys(o.o.pre, o.o.r.db) {
		pre, post := o.o.pre[name], o.o.r.db[name]
		switch {
		case post == nil && pre == nil:
		case post == nil:
			fmt.Fprintf(&b, "|%s deleted", name)
		case pre == nil || !sameEntry(pre, post, 0) || pre.exp != post.exp:
			fmt.Fprintf(&b, "|%s=%s", name, entryText(post, o.nowMS))
		}
	}
	for _, p := range publications(o.o.r) {
		b.WriteString("|pub " + p)
	}
	// Two other holders are alike when only their tokens differ.
	return strings.NewReplacer(otherToken2, otherToken, otherWord2, otherWord).Replace(b.String())
}

// uniform is the state where every key of keys has holder h in form f.
func uniform(keys []int, h holder, f keyType, token int) probeState {
	s := probeState{token: token}
	for _, k := range keys {
		s.keys = append(s.keys, keySpec{k, h, f})
	}
	return s
}

// jointSearch looks for a lock over several keys that only acts when all of
// them are held (an MGET compare then PEXPIRE each): every touched key held
// by one candidate token, against every key held by other tokens. The lock
// found with one KEYS fewer, when there is one, is the only candidate.
func (a *analysis) jointSearch(keys []int, skip map[int]bool) (*finding, error) {
	if len(keys) < 2 {
		return nil, nil
	}
	type cand struct {
		t int
		f keyType
	}
	var cands []cand
	if a.hint != nil && a.hint.tokenless {
		return nil, nil
	}
	if a.hint != nil {
		cands = append(cands, cand{a.posOf(a.hint.tokArg), a.hint.form})
	} else {
		for _, f := range forms {
			for t := range a.vals {
				if !skip[t] {
					cands = append(cands, cand{t, f})
				}
			}
		}
	}
	for _, c := range cands {
		others := make([]string, 2)
		for j, h := range []holder{byOther, byOther2} {
			o, err := a.probe(uniform(keys, h, c.f, -1))
			if err != nil {
				return nil, err
			}
			others[j] = jointSig(o)
		}
		mine, err := a.probe(uniform(keys, byCaller, c.f, c.t))
		if err != nil {
			return nil, err
		}
		if jointSig(mine) == others[0] || others[0] != others[1] {
			continue
		}
		f := &finding{token: c.t, tok: a.vals[c.t], tokArg: argOf(c.t, a.nkeys), form: c.f}
		// The lock keys are those whose holder matters with the others held.
		for i, k := range keys {
			s := uniform(keys, byCaller, c.f, c.t)
			s.keys[i].h = byOther
			o, err := a.probe(s)
			if err != nil {
				return nil, err
			}
			if jointSig(o) != jointSig(mine) {
				f.keys = append(f.keys, k)
			}
		}
		return f, nil
	}
	return nil, nil
}

// tokenless decides a lock without a token: a key the all-absent probe
// wrote with a constant (SET k 1 NX), or a key every held state deletes,
// whoever holds it (an unconditional DEL).
func (a *analysis) tokenless(probes []*keyProbe, s0 *obs) (*finding, error) {
	var f *finding
	for _, kp := range probes {
		w := kp.written
		if w == nil || w.typ == typeList || w.exp == 0 {
			continue
		}
		var c string
		switch w.typ {
		case typeString:
			c = w.str
		case typeHash:
			if len(w.hash) != 1 {
				continue
			}
			c = w.hash[0].f
		case typeZSet:
			if len(w.zset) != 1 {
				continue
			}
			c = w.zset[0].m
		}
		if f == nil {
			f = &finding{token: -1, tok: c, form: w.typ, tokenless: true, tmpl: map[int]*entry{}}
		} else if f.tok != c || f.form != w.typ {
			return nil, &Refusal{Class: ClassBehaviour, Probe: s0.name, Reason: "the script writes different constants to different keys"}
		}
		f.keys = append(f.keys, kp.pos)
		f.tmpl[kp.pos], f.shape = template(w, c, s0.nowMS), "as the script writes it"
	}
	if f != nil {
		return f, nil
	}
	for _, kp := range probes {
		if kp.deletes {
			if f == nil {
				f = &finding{token: -1, tokenless: true}
			}
			f.keys = append(f.keys, kp.pos)
		}
	}
	if f != nil {
		return f, nil
	}
	for _, kp := range probes {
		if kp.held > 0 && kp.errs == kp.held {
			return nil, &Refusal{Class: ClassBehaviour, Arg: posName(kp.pos, a.nkeys),
				Reason: fmt.Sprintf("every probe where %s is held ends in an error (%s): no behaviour to classify", posName(kp.pos, a.nkeys), a.named(kp.err))}
		}
		if kp.renews {
			return nil, &Refusal{Class: ClassBehaviour, Arg: posName(kp.pos, a.nkeys),
				Reason: fmt.Sprintf("the script re-sets the TTL of %s whoever holds it: an extend without a token, which would extend another client's lock", posName(kp.pos, a.nkeys))}
		}
	}
	return nil, &Refusal{Class: ClassBehaviour, Probe: s0.name,
		Reason: "no argument acts as a lock's token, and the script neither takes a free key nor deletes a key whoever holds it"}
}
