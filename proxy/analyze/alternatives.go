package analyze

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// maxAlternatives bounds the script's constants tried for each free
// argument (the analysis's step budget bounds the whole).
const maxAlternatives = 128

// stringConstants returns the script's string constants, sorted and
// without duplicates (Semantics.Constants).
func stringConstants(p *lua.FunctionProto) []string {
	seen := map[string]bool{}
	var walk func(*lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, c := range p.Constants {
			if s, ok := c.(lua.LString); ok && !hiddenName(string(s)) {
				seen[string(s)] = true
			}
		}
		for _, q := range p.FunctionPrototypes {
			walk(q)
		}
	}
	walk(p)
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

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
	for s := range seen {
		if hiddenName(s) {
			delete(seen, s)
		}
	}
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
// each of the script's own constants (and "", "0", "1", "-1"), to each
// other argument's value, and to a long string. The probe values are
// distinct numbers of one length, so a branch on `ARGV[3] == "0"`
// (redis-py's additive extend), on two arguments being equal or on an
// argument's length never shows otherwise; a free argument that changes
// what the script does to the lock, or the lock's TTL, is refused, one
// that only adds the remaining TTL to the lock's TTL is recorded as such.
func (a *analysis) alternatives(sem *Semantics, f *finding, v *verdict, consts []string) error {
	var base []judged
	for _, j := range v.judged {
		if uniformHolders(j.o.s) || a.longHeld {
			base = append(base, j)
		}
	}
	others := a.others(v)
	all := append(a.judgedObs(v), others...)
	keys := keyNames(all)
	saved, cache := append([]string(nil), a.vals...), a.cache
	defer func() { a.vals, a.cache = saved, cache }()
	for _, p := range a.freeArgs(sem) {
		try := func(c string) error {
			a.vals = append([]string(nil), saved...)
			a.vals[p] = c
			a.cache = map[string]*obs{}
			for _, j := range base {
				a.granted = false
				if err := a.sameWith(sem, f, j, j.o.s, fmt.Sprintf("with %s = %q", posName(p, a.nkeys), c), false); err != nil {
					a.noteGrant(p, c)
					return err
				}
			}
			return nil
		}
		n := 0
		for _, c := range consts {
			if n >= maxAlternatives || valueIn(c, saved) {
				continue // another argument's value is tried below
			}
			n++
			if err := try(c); err != nil {
				return err
			}
		}
		for _, c := range argAlternatives(saved, p, a.nkeys, keys) {
			if err := try(c); err != nil {
				return err
			}
		}
	}
	a.vals, a.cache = saved, map[string]*obs{}
	if err := a.roleAlternatives(sem, f, base); err != nil {
		return err
	}
	if err := a.contentAlternatives(sem, f, base, keys); err != nil {
		return err
	}
	if err := a.heldTTLAlternatives(sem, f, v, base, others); err != nil {
		return err
	}
	if err := a.ttlArgAlternatives(sem, f, v, base, others); err != nil {
		return err
	}
	return a.auxAlternatives(sem, f, base, all, consts)
}

// auxAlternatives reruns the uniform states with each key other than the
// lock's holding what the script itself writes there (a latch's result, a
// counter, a signal list) and, where the script reads it as a string, each
// of the script's constants: a script may act on the lock according to
// another key's content. A release that answers yes without acting then
// replays an earlier answer (Redisson's idempotency latch) and is accepted;
// an acquire or an extend doing so is not: the client would believe in a
// lock that is not there.
func (a *analysis) auxAlternatives(sem *Semantics, f *finding, base []judged, all []*obs, consts []string) error {
	replay := sem.Kind == Release || sem.Kind == ReentrantRelease
	for _, k := range sem.AuxKeys {
		p := a.posOf(k)
		for _, val := range a.auxValues(p, all, consts) {
			for _, j := range base {
				s := j.o.s
				s.aux, s.auxVal, s.auxDes = p, val.e, val.des
				if err := a.sameWith(sem, f, j, s, fmt.Sprintf("with %s holding %s", k, val.des), replay); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type auxValue struct {
	e   *entry
	des string
}

// auxValues are the contents tried in key p: every value the probes left
// there, and the script's constants as strings if it reads p as a string
// (non-negative numbers only for a counter, whose INCR starts at 0).
func (a *analysis) auxValues(p int, all []*obs, consts []string) []auxValue {
	key := a.vals[p]
	var out []auxValue
	seen := map[string]bool{}
	add := func(e *entry, des string) {
		if t := entryText(e, 0); !seen[t] && len(out) < maxAlternatives {
			seen[t] = true
			out = append(out, auxValue{e, des})
		}
	}
	readsString, counter := false, false
	for _, o := range all {
		if e := o.o.r.db[key]; e != nil {
			c := e.clone()
			c.exp = 0
			add(c, "what the script writes there")
		}
		for _, c := range o.o.r.calls {
			switch {
			case len(c.args) < 2 || c.args[1] != key:
			case c.name == "get" || c.name == "getrange" || c.name == "strlen" || c.name == "mget":
				readsString = true
			case isCounterCall(c):
				counter = true
			}
		}
	}
	for _, c := range consts {
		n, isInt := parseInt(c)
		if readsString && c != "" && (!counter || (isInt && n >= 0)) {
			add(&entry{typ: typeString, str: c}, strconv.Quote(c))
		}
	}
	return out
}

// longAlternative is the long string a free argument is tried with: the
// probe values are all 13 digits long. hugeAlternative is a number above
// every probe value, for a threshold they all stay below.
var (
	longAlternative = strings.Repeat("x", 64)
	hugeAlternative = "999999999999999999"
)

// argAlternatives are the values free argument p is tried with besides the
// script's constants: every other argument's probe value (a script may
// compare ARGV[3] with ARGV[1]), a long string and a huge number, each once.
// A value that names a key is tried only for an ARGV argument, and only a
// KEYS argument's value: the analysis attributes what the script does to a
// key to the first argument holding its name, which is then still the
// KEYS one (ARGV[3] == KEYS[1] is tried; two KEYS naming one key are not).
func argAlternatives(vals []string, p, nkeys int, keys map[string]bool) []string {
	out := make([]string, 0, len(vals))
	for i, v := range append(append([]string(nil), vals...), longAlternative, hugeAlternative) {
		keyOK := !keys[v] || (p >= nkeys && i < nkeys)
		if i != p && v != vals[p] && keyOK && !valueIn(v, out) {
			out = append(out, v)
		}
	}
	return out
}

// keyNames are the keys any of the runs os found or left in the database.
func keyNames(os []*obs) map[string]bool {
	names := map[string]bool{}
	for _, o := range os {
		for k := range o.o.pre {
			names[k] = true
		}
		for _, k := range o.o.r.db.names() {
			names[k] = true
		}
	}
	return names
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
func (a *analysis) sameWith(sem *Semantics, f *finding, j judged, s probeState, with string, replay bool) error {
	return a.sameWithAs(sem, f, f, j, s, with, replay)
}

// sameWithAs is sameWith where the rerun's lock is fGot: the same lock as
// f with another token value (roles.go).
func (a *analysis) sameWithAs(sem *Semantics, f, fGot *finding, j judged, s probeState, with string, replay bool) error {
	o, _, err := a.rerun(sem, f, fGot, j, s, with, replay)
	if err != nil || o == nil {
		return err
	}
	return a.otherTTLs(sem, f, o, with)
}

// rerun runs state s with the current (alternative) values and compares
// what it does to the lock (fGot) with what judged state j did (f): an
// error when it answers or acts otherwise; declined when it answers no and
// writes no lock key, or, with replay, answers yes and writes none (both
// safe whatever the value). o is the run, nil when it failed.
func (a *analysis) rerun(sem *Semantics, f, fGot *finding, j judged, s probeState, with string, replay bool) (o *obs, declined bool, err error) {
	o, err = a.probeOnce(s)
	if errors.Is(err, errRestart{}) {
		return nil, false, &Refusal{Class: ClassBehaviour, Probe: j.o.name, Reason: with + " the script reads other arguments"}
	}
	if err != nil {
		return nil, false, err
	}
	if err := a.newCommandArg(sem, o, with); err != nil {
		return o, false, err
	}
	want, got := a.effects(f, j.o), a.effects(fGot, o)
	if a.judgedVals != nil { // a key's name differs from j's run
		cur := a.vals
		a.vals = a.judgedVals
		want = a.effects(f, j.o)
		a.vals = cur
	}
	yes := o.o.err == "" && sem.Yes.Match(&o.o.reply, a.nkeys)
	if sem.SameReply && o.o.err == "" {
		yes = j.yes // the reply tells nothing: the effects below decide
	}
	if sem.AbsentIsYes && yes && !j.yes && a.lockAbsentThrough(fGot, o) {
		yes = false // no lock to release: its yes releases nothing (absentAnswersYes)
	}
	declined = !yes
	for _, e := range got {
		declined = declined && e == effNone
	}
	replayed := yes && replay
	for _, e := range got {
		replayed = replayed && e == effNone
	}
	a.countersWith(sem, o)
	if declined || replayed {
		return o, true, nil
	}
	if yes != j.yes {
		a.granted = yes
		return o, false, &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("%s the script answers %s, where otherwise it answers %s", with, o.o.reply, j.o.o.reply)}
	}
	for i := range got {
		if got[i] != want[i] {
			return o, false, &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("%s the script %s %s, where otherwise it %s", with, got[i], posName(f.keys[i], a.nkeys), want[i])}
		}
	}
	return o, false, nil
}

// otherTTLs records the expiries a run with an alternative value set: the
// lock's own TTL may turn out additive; a lock TTL of another argument,
// unit or constant is refused (the value decides how long the lock lives,
// in a way the probes did not read: a TTL clamped by a threshold the probe
// values always crossed); any other expiry joins OtherTTLs.
func (a *analysis) otherTTLs(sem *Semantics, f *finding, o *obs, with string) error {
	for _, name := range o.o.r.db.names() {
		t, set, ref := a.ttlOf(o, name)
		lock := contains(f.keys, o.o.r.pos(name))
		switch {
		case ref != nil && !incremented(o, name):
			return ref
		case !set:
		case sem.TTL != nil && lock && t.Arg == sem.TTL.Arg && t.Unit == sem.TTL.Unit && t.Const == sem.TTL.Const:
			sem.TTL.AddsRemaining = sem.TTL.AddsRemaining || t.AddsRemaining
		case sem.TTL != nil && lock:
			return &Refusal{Class: ClassBehaviour, Probe: o.name, Arg: t.Key.String(),
				Reason: fmt.Sprintf("%s the script sets %s's TTL to %s, where otherwise it is %s", with, t.Key, t, *sem.TTL)}
		default:
			sem.OtherTTLs = addTTL(sem.OtherTTLs, t)
		}
	}
	return nil
}

// newCommandArg refuses a rerun that took a command name from an argument
// the verdict does not list in CommandArgs: the proxy checks only those,
// per call, to name PUBLISH or SPUBLISH, so a path only an alternative
// reached (a guarded one) could run any command a client names there. (A
// run names the first argument holding the name's value: an alternative
// that gives another argument a listed one's value names that one.)
func (a *analysis) newCommandArg(sem *Semantics, o *obs, with string) error {
	for _, c := range o.o.r.calls {
		if c.from < 0 {
			continue
		}
		listed := false
		for _, x := range sem.CommandArgs {
			if p := a.posOf(x); p >= 0 && p < len(a.vals) && a.vals[p] == a.vals[c.from] {
				listed = true
			}
		}
		if !listed {
			x := argOf(c.from, a.nkeys)
			return &Refusal{Class: ClassBehaviour, Probe: o.name, Arg: x.String(),
				Reason: fmt.Sprintf("%s the script takes a command name from %s, which it does not with the probe values", with, x)}
		}
	}
	return nil
}
