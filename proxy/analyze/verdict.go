package analyze

import (
	"fmt"
	"strings"
)

// maxLockKeys bounds the lock keys probed together: 3^n states.
const maxLockKeys = 3

// state builds a probe state of the lock keys with the given holders.
func (f *finding) state(hs []holder, form keyType) probeState {
	s := probeState{token: f.token, tok: f.tok, tmpl: f.tmpl, shape: f.shape}
	for i, k := range f.keys {
		s.keys = append(s.keys, keySpec{k, hs[i], form})
	}
	return s
}

func same(n int, h holder) []holder {
	hs := make([]holder, n)
	for i := range hs {
		hs[i] = h
	}
	return hs
}

// judge probes the lock keys in every combination of holders, reads the
// kind from the uniform states and checks every other state against it.
func (a *analysis) judge(f *finding) (*verdict, error) {
	n := len(f.keys)
	if n > maxLockKeys {
		return nil, &Refusal{Class: ClassBehaviour, Reason: fmt.Sprintf("the script locks %d keys; the analyzer probes at most %d together", n, maxLockKeys)}
	}
	if f.form == 0 {
		return a.judgeDelete(f)
	}
	hash := f.form == typeHash && n == 1
	v := &verdict{}
	run := func(h holder) (*obs, effect, error) {
		o, err := a.probe(f.state(same(n, h), f.form))
		if err == nil {
			err = a.errored(o)
		}
		if err != nil {
			return nil, 0, err
		}
		e, err := a.uniformEffect(f, o)
		return o, e, err
	}
	var e0, ec, eo, eo2, er effect
	var err error
	var o2 *obs
	if v.s0, e0, err = run(absent); err != nil {
		return nil, err
	}
	if v.holders, ec, err = run(byCaller); err != nil {
		return nil, err
	}
	if v.contend, eo, err = run(byOther); err != nil {
		return nil, err
	}
	if o2, eo2, err = run(byOther2); err != nil {
		return nil, err
	}
	if hash {
		if _, er, err = run(reentered); err != nil {
			return nil, err
		}
	}
	kind, ok := kindOf(e0, ec, er, hash)
	if !ok {
		desc := fmt.Sprintf("with the lock absent the script %s, held by the caller it %s", e0, ec)
		if hash {
			desc += fmt.Sprintf(", re-entered it %s", er)
		}
		return nil, &Refusal{Class: ClassBehaviour, Reason: "the behaviour fits no lock class: " + desc}
	}
	v.kind = kind
	switch {
	case eo != eo2:
		return nil, &Refusal{Class: ClassBehaviour, Probe: o2.name, Reason: "the script treats two other tokens differently"}
	case eo == effNone:
	case eo == effTake && (kind == Acquire || kind == AcquireOrExtend):
		// A force acquire overwrites whatever is there, the caller's own
		// lock included: re-setting the TTL there is not a separate class.
		v.force, v.kind = true, Acquire
	case eo == effGone && kind == Release:
		v.force = true
	default:
		return nil, &Refusal{Class: ClassBehaviour, Probe: v.contend.name, Reason: fmt.Sprintf("held by another token, the script %s", eo)}
	}
	return v, a.judgeAll(f, v, hash)
}

// judgeAll probes every combination of absent, caller's and other's holds
// over the lock keys (and the re-entered hash) and checks each against the
// kind: all or nothing, and the yes exactly where the kind says.
func (a *analysis) judgeAll(f *finding, v *verdict, hash bool) error {
	n := len(f.keys)
	combos := [][]holder{{}}
	for range f.keys {
		var next [][]holder
		for _, c := range combos {
			for _, h := range []holder{absent, byCaller, byOther} {
				next = append(next, append(append([]holder(nil), c...), h))
			}
		}
		combos = next
	}
	combos = append(combos, same(n, byOther2))
	if hash {
		combos = append(combos, []holder{reentered}, same(n, shared))
	}
	for _, hs := range combos {
		o, err := a.probe(f.state(hs, f.form))
		if err == nil {
			err = a.errored(o)
		}
		if err != nil {
			return err
		}
		yes, want := expect(v.kind, v.force, hs)
		got := a.effects(f, o)
		for i := range got {
			// A release or an extend that does not answer yes may leave
			// the caller's keys as they were (all or nothing) or act on
			// them one by one: neither touches another holder's.
			partial := !yes && (v.kind == Release || v.kind == Extend) && got[i] == effNone
			if got[i] != want[i] && !partial {
				return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("as %s the script should have %s %s, it %s",
					kindPhrase(v), want[i], posName(f.keys[i], a.nkeys), got[i])}
			}
		}
		v.judged = append(v.judged, judged{o, yes})
	}
	return nil
}

func kindPhrase(v *verdict) string {
	if v.force {
		return "a force " + v.kind.String()
	}
	return "a " + v.kind.String()
}

// expect gives the verdict and per-key effects a kind has in a state.
func expect(k Kind, force bool, hs []holder) (bool, []effect) {
	effs := make([]effect, len(hs))
	all := func(ok func(holder) bool) bool {
		for _, h := range hs {
			if !ok(h) {
				return false
			}
		}
		return true
	}
	mine := func(h holder) bool { return h == byCaller || h == reentered || h == shared }
	var yes bool
	switch k {
	case Acquire, AcquireOrExtend:
		yes = force || all(func(h holder) bool { return h == absent || (k == AcquireOrExtend && (h == byCaller || h == shared)) })
		for i, h := range hs {
			switch {
			case !yes:
			case h == byCaller || h == shared:
				effs[i] = effRenew
			default:
				effs[i] = effTake
			}
		}
	case ReentrantAcquire:
		yes = !all(func(h holder) bool { return h == byOther || h == byOther2 })
		for i, h := range hs {
			effs[i] = map[holder]effect{absent: effTake, byCaller: effInc, reentered: effInc, shared: effInc}[h]
		}
	case Release, ReentrantRelease:
		yes = all(func(h holder) bool { return mine(h) || (force && h != absent) })
		for i, h := range hs {
			switch {
			case h == reentered && k == ReentrantRelease:
				effs[i] = effDec
			case mine(h), force && h != absent:
				effs[i] = effGone
			}
		}
	case Extend:
		yes = all(mine)
		for i, h := range hs {
			if mine(h) {
				effs[i] = effRenew
			}
		}
	case Read:
		yes = all(mine)
	}
	return yes, effs
}

// judgeDelete checks a tokenless release: every held state, in every form
// and whoever the holder, ends with the key deleted; the absent one leaves
// it absent.
func (a *analysis) judgeDelete(f *finding) (*verdict, error) {
	v := &verdict{kind: Release, force: true}
	n := len(f.keys)
	var err error
	if v.s0, err = a.probe(f.state(same(n, absent), typeString)); err != nil {
		return nil, err
	}
	v.judged = append(v.judged, judged{v.s0, false})
	for _, form := range forms {
		for _, h := range []holder{byOther, byOther2} {
			o, err := a.probe(f.state(same(n, h), form))
			if err == nil {
				err = a.errored(o)
			}
			if err != nil {
				return nil, err
			}
			for i, e := range a.effects(f, o) {
				if e != effGone {
					return nil, &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: "the script deletes some held keys and not others: " + posName(f.keys[i], a.nkeys) + " was " + strings.TrimPrefix(e.String(), "the ")}
				}
			}
			if v.contend == nil {
				v.contend, v.holders = o, o
			}
			v.judged = append(v.judged, judged{o, true})
		}
	}
	return v, nil
}
