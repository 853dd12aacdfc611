package analyze

import (
	"errors"
	"fmt"
	"sort"

	lua "github.com/yuin/gopher-lua"
)

// maxAlternatives bounds the values tried for each free argument.
const maxAlternatives = 32

// constants returns the script's string and number constants, sorted and
// without duplicates: the values a script may compare an argument with.
func constants(p *lua.FunctionProto) []string {
	seen := map[string]bool{}
	var walk func(*lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, c := range p.Constants {
			if s, ok := toStr(c); ok {
				seen[s] = true
			}
		}
		for _, q := range p.FunctionPrototypes {
			walk(q)
		}
	}
	walk(p)
	for _, s := range []string{"", "0", "1", "-1"} {
		seen[s] = true
	}
	delete(seen, concatName)
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// freeArgs returns the arguments the analysis found no role for: neither a
// key, the token, a TTL, the SELECT argument nor a command name.
func (a *analysis) freeArgs(sem *Semantics) []int {
	used := map[Arg]bool{sem.Token.Arg: true, sem.DBArg: true}
	for _, k := range append(append([]Arg(nil), sem.LockKeys...), sem.AuxKeys...) {
		used[k] = true
	}
	for _, k := range sem.CommandArgs {
		used[k] = true
	}
	for _, t := range append(sem.OtherTTLs, ttlList(sem.TTL)...) {
		used[t.Arg] = true
	}
	var out []int
	for i := range a.vals {
		if !used[argOf(i, a.nkeys)] {
			out = append(out, i)
		}
	}
	return out
}

func ttlList(t *TTL) []TTL {
	if t == nil {
		return nil
	}
	return []TTL{*t}
}

// alternatives re-runs the uniform states with each free argument set to
// each of the script's own constants (and "", "0", "1", "-1"). The probe
// values are distinct numbers, so a branch on `ARGV[3] == "0"` (redis-py's
// additive extend) never shows; a free argument that changes what the
// script does to the lock is refused, one that only adds the remaining TTL
// to the lock's TTL is recorded as such.
func (a *analysis) alternatives(sem *Semantics, f *finding, v *verdict, consts []string) error {
	var base []judged
	for _, j := range v.judged {
		if uniformHolders(j.o.s) {
			base = append(base, j)
		}
	}
	saved, cache := append([]string(nil), a.vals...), a.cache
	defer func() { a.vals, a.cache = saved, cache }()
	for _, p := range a.freeArgs(sem) {
		n := 0
		for _, c := range consts {
			if n >= maxAlternatives || valueIn(c, saved) {
				continue
			}
			n++
			a.vals = append([]string(nil), saved...)
			a.vals[p] = c
			a.cache = map[string]*obs{}
			for _, j := range base {
				if err := a.sameWith(sem, f, j, fmt.Sprintf("with %s = %q", posName(p, a.nkeys), c)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func valueIn(s string, vals []string) bool {
	for _, v := range vals {
		if v == s {
			return true
		}
	}
	return false
}

func uniformHolders(s probeState) bool {
	for _, k := range s.keys {
		if k.h != s.keys[0].h || k.f != s.keys[0].f {
			return false
		}
	}
	return true
}

// sameWith reruns judged state j with the current (alternative) values and
// checks it does to the lock what it did with the probe values, or declines:
// a no, or an error, that writes no lock key is safe whatever the value.
func (a *analysis) sameWith(sem *Semantics, f *finding, j judged, with string) error {
	o, err := a.probeOnce(j.o.s)
	if errors.Is(err, errRestart{}) {
		return &Refusal{Class: ClassBehaviour, Probe: j.o.name, Reason: with + " the script reads other arguments"}
	}
	if err != nil {
		return err
	}
	want, got := a.effects(f, j.o), a.effects(f, o)
	yes := o.o.err == "" && sem.Yes.Match(&o.o.reply, a.nkeys)
	declined := !yes
	for _, e := range got {
		declined = declined && e == effNone
	}
	if declined {
		return a.otherTTLs(sem, f, o)
	}
	if yes != j.yes {
		return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("%s the script answers %s, where otherwise it answers %s", with, o.o.reply, j.o.o.reply)}
	}
	for i := range got {
		if got[i] != want[i] {
			return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("%s the script %s %s, where otherwise it %s", with, got[i], posName(f.keys[i], a.nkeys), want[i])}
		}
	}
	return a.otherTTLs(sem, f, o)
}

// otherTTLs records the expiries a run set: the lock's own TTL may turn out
// additive, any other joins OtherTTLs.
func (a *analysis) otherTTLs(sem *Semantics, f *finding, o *obs) error {
	for _, name := range o.o.r.db.names() {
		t, set, ref := a.ttlOf(o, name)
		switch {
		case ref != nil && !incremented(o, name):
			return ref
		case !set:
		case sem.TTL != nil && contains(f.keys, o.o.r.pos(name)) && t.Arg == sem.TTL.Arg && t.Unit == sem.TTL.Unit && t.Const == sem.TTL.Const:
			sem.TTL.AddsRemaining = sem.TTL.AddsRemaining || t.AddsRemaining
		default:
			sem.OtherTTLs = addTTL(sem.OtherTTLs, t)
		}
	}
	return nil
}
