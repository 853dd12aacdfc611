package analyze

import (
	"errors"
	"fmt"
	"strconv"
)

// A script may test the lock's remaining TTL against an argument before it
// looks at the token: redlock-universal's ATOMIC_EXTEND answers {0, PTTL}
// without acting when the lock has less than ARGV[2] ms left, and only then
// compares the token. Every held key of the probes has about 7,000,003 ms
// left, far below every argument's probe value (about 1.8e12), so the
// token's role never shows and such a script is refused ("no argument acts
// as a lock's token").
//
// analyzeLongHeld analyzes a script that read a remaining TTL and was
// refused for its behaviour a second time, whole, with every held key
// holding more time than any argument's value (longHeldBase). The verdict
// of that analysis stands only if it also holds where real calls are:
//
//   - every judged state (mixed holders too) and every probe of another
//     form or key is rerun with the held keys at realistic remaining TTLs
//     (heldTTLs, and the first analysis's own): with the arguments at their
//     probe values the guard turns the script away, which is safe only as
//     a decline (a no that writes no lock key);
//   - ttlArgAlternatives sets each argument without a role just below, at
//     and just above each of those remaining TTLs (in ms and in seconds),
//     so that the guarded path runs with realistic TTLs too: a branch on a
//     band of realistic TTLs, or on the argument, must do to the lock what
//     the verdict says or decline;
//   - the free arguments' alternatives run on every judged state, not only
//     the uniform ones.
//
// A batch (batch.go) is not tried in this analysis.
func (a *analysis) analyzeLongHeld(first error) (*Semantics, error) {
	var r *Refusal
	if !errors.As(first, &r) || r.Class != ClassBehaviour {
		return nil, first
	}
	b := &analysis{opt: a.opt, b: a.b, v: a.v, consts: a.consts, longHeld: true, readsTTL: true, runs: a.runs}
	sem, err := b.analyze()
	a.runs = b.runs
	if err == nil {
		return sem, nil
	}
	// The first refusal stays the reason and where; the second's reason
	// is appended, both clipped to fit one field (MaxRefusalField).
	why := err.Error()
	var r2 *Refusal
	if errors.As(err, &r2) {
		why = r2.Reason
	}
	const sep = "; with held TTLs above every argument: "
	out := *r
	head := Clip(r.Reason, 112)
	out.Reason = head + sep + Clip(why, MaxRefusalField-len(head)-len(sep))
	return nil, &out
}

// ttlArgAlternatives, for a script that reads a remaining TTL, reruns the
// held judged states (the uniform ones, or every one in the long-held
// analysis, with its other probes) with each held key at each remaining
// TTL of heldTTLs, and each argument without a role set around it: ms-1,
// ms+1 and the same in seconds. A guard `if pttl < tonumber(ARGV[2])`
// then runs both ways at realistic TTLs; the script must do to the lock
// what it did, or decline.
func (a *analysis) ttlArgAlternatives(sem *Semantics, f *finding, v *verdict, base []judged, others []*obs) error {
	if !a.readsTTL {
		return nil
	}
	free := a.freeArgs(sem)
	if len(free) == 0 {
		return nil
	}
	if a.longHeld {
		base, others = v.judged, auxProbes(f, others)
	} else {
		others = nil
	}
	// A third token's hold is tried with the probe values (judged) and at
	// each remaining TTL (heldTTLAlternatives): here, where each state
	// costs a run per TTL and value, another token's stands for it.
	var held []judged
	for _, j := range heldStates(base) {
		if !holdsOnly(j.o.s, byOther2) {
			held = append(held, j)
		}
	}
	var rest []*obs
	for _, o := range others {
		if !holdsOnly(o.s, byOther2) {
			rest = append(rest, o)
		}
	}
	others = rest
	if len(held) == 0 {
		return nil
	}
	set := constTTLs(sem)
	saved := append([]string(nil), a.vals...)
	defer func() { a.vals, a.cache = saved, map[string]*obs{} }()
	for _, ms := range a.crossTTLs() {
		if containsInt(set, ms) {
			continue
		}
		for _, p := range free {
			for _, n := range aroundTTL(ms) {
				a.vals = append([]string(nil), saved...)
				a.vals[p] = strconv.FormatInt(n, 10)
				a.cache = map[string]*obs{}
				with := fmt.Sprintf("with the held lock's remaining TTL at %dms and %s = %d", ms, posName(p, a.nkeys), n)
				if err := a.heldTTLRerun(sem, f, v, held, others, ms, with); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// crossTTLLadder are the remaining TTLs ttlArgAlternatives tries besides
// the script's numeric constants around them (as heldTTLs): fewer than
// heldTTLLadder, since each is tried with several argument values.
var crossTTLLadder = []int64{1, 2, 10, 100, 1000, 10000, 30000, 60000, 3600000}

// crossTTLs are crossTTLLadder and, as in heldTTLs, each positive numeric
// constant n of the script as a threshold in ms (n-1, n, n+1) and in
// seconds (where TTL reads n), and in the long-held analysis the first
// analysis's remaining TTL.
func (a *analysis) crossTTLs() []int64 {
	return a.ttlsAround(crossTTLLadder)
}

// aroundTTL are the values an argument compared with a remaining TTL of ms
// is tried with: on either side of it, in ms and in seconds (TTL rounds to
// the nearest second). Below every remaining TTL the argument's probe
// value already is.
func aroundTTL(ms int64) []int64 {
	var out []int64
	for _, n := range []int64{ms - 1, ms + 1, (ms + 500) / 1000, (ms+500)/1000 + 1} {
		if n >= 0 && !containsInt(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func containsInt(xs []int64, x int64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// holdsOnly reports whether every key of s is held by h.
func holdsOnly(s probeState, h holder) bool {
	for _, k := range s.keys {
		if k.h != h {
			return false
		}
	}
	return len(s.keys) > 0
}
