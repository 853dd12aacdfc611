package analyze

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// analysis is the state of one Analyze call.
type analysis struct {
	opt          Options
	b            *budget
	v            *vm
	nkeys, nargs int
	vals         []string // probe value of each argument, KEYS first
	dbArg        Arg      // the argument SELECT takes, probed as "0"
	hint         *finding // the lock found with one KEYS fewer
	consts       []string // the script's constants, tried as argument values
	strs         []string // its string constants (Semantics.Constants)
	cache        map[string]*obs
	// judgedVals, when set, are the values the judged states ran with,
	// while an alternative gives a key argument another name (content.go).
	judgedVals []string
	// wordOthers: other holders' tokens are otherWord and otherWord2
	// (probe.go), while a word is tried as the caller's token.
	wordOthers bool
	runs       int
	// readsTTL: a run read a key's remaining TTL (PTTL, TTL).
	readsTTL bool
	// longHeld: held keys have more time left than any argument's value
	// (the second analysis of longheld.go).
	longHeld bool
	// modes are arguments probed with one of the script's constants
	// instead of a probe number (mode.go); grants is the first such
	// argument and constant an alternative run found granting where the
	// probe values declined.
	modes   map[Arg]string
	grants  *modeArg
	granted bool // the last rerun answered yes where its judged state said no
}

// Analyze decides what the Lua script body does to a lock. It returns a
// *Refusal when the script does not fit a lock class exactly or does
// anything the analyzer cannot vouch for. It is deterministic, touches no
// network and is safe for concurrent use: callers run it once per distinct
// script, off the request path, and cache the result.
func Analyze(body []byte, opts Options) (*Semantics, error) {
	return AnalyzeContext(context.Background(), body, opts)
}

// AnalyzeContext is Analyze that also stops, refused, when ctx is done
// (checked with the time budget, every 1024 steps).
func AnalyzeContext(ctx context.Context, body []byte, opts Options) (*Semantics, error) {
	opt := opts.withDefaults()
	proto, err := compile(body, opt.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	b, release := newBudget(ctx, opt)
	defer release()
	v := newVM(proto, b)
	defer v.L.Close()
	a := &analysis{opt: opt, b: b, v: v, consts: constants(proto), strs: stringConstants(proto)}
	sem, err := a.analyzeAll()
	if err != nil && a.grants != nil {
		sem, err = a.analyzeInMode(err)
	}
	if sem != nil && sem.Batch == nil {
		sem.ArgvCountBlind = argvCountBlind(body, sem.MinArgs)
	}
	return sem, err
}

// analyzeAll is analyze, then, for a script that read a remaining TTL and
// was refused for its behaviour, the long-held analysis (longheld.go).
func (a *analysis) analyzeAll() (*Semantics, error) {
	sem, err := a.analyze()
	if err != nil && a.readsTTL {
		return a.analyzeLongHeld(err)
	}
	return sem, err
}

// analyze runs the whole analysis: the layouts, their combination, the
// alternatives, or the batch check.
func (a *analysis) analyze() (*Semantics, error) {
	first, second, err := a.layouts()
	if err != nil {
		if first == nil || a.longHeld {
			return nil, err
		}
		// Understood with one key, not with two: a batch of one-key
		// operations, or refused (batch.go).
		return a.batchOf(first, err)
	}
	k0 := first.sem.MinKeys
	// What the layouts agree on is the script's behaviour with the probe
	// values; the alternatives, tried once, may add to its TTLs or refuse.
	alt := *second.sem
	alt.OtherTTLs = append([]TTL(nil), second.sem.OtherTTLs...)
	alt.Counters = append([]Counter(nil), second.sem.Counters...)
	if alt.TTL != nil {
		t := *alt.TTL
		alt.TTL = &t
	}
	one := *first.sem // combine changes first.sem
	sem, err := combine(first.sem, second.sem, k0)
	if err != nil {
		if k0 != 1 || a.longHeld {
			return nil, err
		}
		first.sem = &one
		return a.batchOf(first, err)
	}
	if err := a.alternatives(&alt, second.f, second.v, a.consts); err != nil {
		return nil, err
	}
	if alt.TTL != nil && alt.TTL.AddsRemaining {
		sem.TTL.AddsRemaining = true
	}
	for _, t := range alt.OtherTTLs {
		if t.Key != (Arg{Keys: true, Index: k0 + 1}) || !sem.EachKey {
			sem.OtherTTLs = addTTL(sem.OtherTTLs, t)
		}
	}
	sem.Counters = refusedCounters(sem.Counters, alt.Counters)
	sem.Probes = a.runs
	return sem, nil
}

// layouts analyzes the script with as many KEYS as it reads, then with one
// more: that tells a lock over every KEYS (the extra key is locked too)
// from one over fixed KEYS (it is ignored).
func (a *analysis) layouts() (first, second *layoutResult, err error) {
	first, err = a.settle()
	var r *Refusal
	if a.nkeys == 0 && errors.As(err, &r) && r.Class == ClassBehaviour {
		// A script that reaches KEYS only through ipairs or #KEYS reads
		// none beyond the end and shows nothing without one.
		a.nkeys = 1
		first, err = a.settle()
	}
	if err != nil {
		return nil, nil, err
	}
	k0 := a.nkeys
	a.nkeys++
	a.hint = first.f
	if second, err = a.settle(); err != nil {
		if k0 != 1 {
			first = nil
		}
		return first, nil, err
	}
	if a.nkeys != k0+1 {
		return nil, nil, &Refusal{Class: ClassBehaviour, Reason: fmt.Sprintf("with %d KEYS the script reads KEYS[%d]: it reads past its last key", k0+1, a.nkeys)}
	}
	return first, second, nil
}

// batchOf analyzes the script as a batch of the operation first found with
// one key (batch.go), after the layout with two keys was refused (why).
func (a *analysis) batchOf(first *layoutResult, why error) (*Semantics, error) {
	a.nkeys, a.nargs, a.vals, a.dbArg = first.nkeys, first.nargs, first.vals, first.dbArg
	a.cache, a.hint = map[string]*obs{}, nil
	sem := *first.sem
	sem.OtherTTLs = append([]TTL(nil), first.sem.OtherTTLs...)
	if sem.TTL != nil {
		t := *sem.TTL
		sem.TTL = &t
	}
	if err := a.alternatives(&sem, first.f, first.v, a.consts); err != nil {
		return nil, why
	}
	out, err := a.batch(&sem, why)
	if err != nil {
		return nil, err
	}
	out.Probes = a.runs
	return out, nil
}

// settle analyzes the current layout, again whenever a run asks for more
// KEYS or ARGV or reveals a SELECT argument, within the bounds.
func (a *analysis) settle() (*layoutResult, error) {
	for {
		switch {
		case a.nkeys > a.opt.MaxKeys:
			return nil, &Refusal{Class: ClassBehaviour, Reason: fmt.Sprintf("the script reads KEYS[%d], more than the %d the analyzer probes", a.nkeys, a.opt.MaxKeys)}
		case a.nargs > a.opt.MaxArgs:
			return nil, &Refusal{Class: ClassBehaviour, Reason: fmt.Sprintf("the script reads ARGV[%d], more than the %d the analyzer probes", a.nargs, a.opt.MaxArgs)}
		}
		a.vals = make([]string, a.nkeys+a.nargs)
		for i := range a.vals {
			a.vals[i] = argValue(i)
			if argOf(i, a.nkeys) == a.dbArg {
				a.vals[i] = "0"
			}
			if c, ok := a.modes[argOf(i, a.nkeys)]; ok {
				a.vals[i] = c
			}
		}
		a.cache = map[string]*obs{}
		res, err := a.layout()
		if res != nil {
			res.nkeys, res.nargs, res.vals, res.dbArg = a.nkeys, a.nargs, a.vals, a.dbArg
		}
		if !errors.Is(err, errRestart{}) {
			return res, err
		}
	}
}

// combine merges the analyses with k0 and k0+1 KEYS.
func combine(x, y *Semantics, k0 int) (*Semantics, error) {
	extra := Arg{Keys: true, Index: k0 + 1}
	each := len(y.LockKeys) == len(x.LockKeys)+1 && y.LockKeys[len(y.LockKeys)-1] == extra
	if each {
		for i, k := range x.LockKeys {
			if k != (Arg{Keys: true, Index: i + 1}) {
				return nil, &Refusal{Class: ClassBehaviour, Reason: "the script locks every KEYS but also other arguments"}
			}
		}
		if x.Yes.Type == IntReply && x.Yes.Cmp == IntEq && x.Yes.Int == int64(k0) &&
			y.Yes.Cmp == IntEq && y.Yes.Int == int64(k0+1) {
			x.Yes.Cmp, x.Yes.Int = IntEqNumKeys, 0
			y.Yes = x.Yes
		}
		x.EachKey = true
		y.LockKeys = x.LockKeys
	}
	y.MinKeys, y.EachKey, y.Probes = x.MinKeys, x.EachKey, x.Probes
	if !reflect.DeepEqual(x, y) {
		return nil, &Refusal{Class: ClassBehaviour, Reason: fmt.Sprintf("with %d KEYS the script behaves otherwise than with %d (%s)", k0+1, k0, semDiff(x, y))}
	}
	return x, nil
}

func argOf(i, nkeys int) Arg {
	if i < nkeys {
		return Arg{Keys: true, Index: i + 1}
	}
	return Arg{Index: i - nkeys + 1}
}

func (a *analysis) posOf(x Arg) int {
	if x.Keys {
		return x.Index - 1
	}
	return a.nkeys + x.Index - 1
}
