package analyze

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Held lock keys in the probes have about 7,000,003 ms left (heldPTTL),
// never under a threshold a script may test: `if redis.call('pttl', k) <
// 1000 then <take it> end` takes over a lease about to run out, while its
// holder's validity still runs, and no probe would show it.
// heldTTLAlternatives reruns the uniform states that hold a lock key with
// every held key's remaining TTL at small and threshold values, and
// refuses a script that then answers or treats the lock otherwise.

// heldTTLLadder are the remaining TTLs tried, in ms, besides the script's
// numeric constants around them: a lease about to run out (1 ms, around
// the drift allowance of short locks), and round figures up to an hour.
var heldTTLLadder = []int64{1, 2, 3, 5, 10, 11, 50, 99, 100, 101, 499, 500, 501, 999, 1000, 1001, 1499, 1500, 1501, 2000, 5000, 10000, 30000, 60000, 3600000}

// maxHeldTTLs bounds the remaining TTLs tried.
const maxHeldTTLs = 64

// heldTTLs are heldTTLLadder and, for each positive numeric constant n of
// the script, n-1, n and n+1 (a threshold in ms) and the PTTLs around
// where TTL, which rounds, reads n seconds (1000n-501 ... 1000n+500).
func (a *analysis) heldTTLs() []int64 {
	out := a.ttlsAround(heldTTLLadder)
	if a.longHeld {
		// the first analysis's remaining TTLs
		out = append(out, heldPTTL(0), heldPTTL(1))
	}
	return out
}

// ttlsAround is heldTTLs with another ladder.
func (a *analysis) ttlsAround(ladder []int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	add := func(n int64) {
		if n > 0 && n < a.heldPTTL(0) && !seen[n] && len(out) < maxHeldTTLs {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, n := range ladder {
		add(n)
	}
	for _, c := range a.consts {
		if n, ok := parseInt(c); ok && n > 0 {
			add(n - 1)
			add(n)
			add(n + 1)
		}
	}
	for _, c := range a.consts {
		if n, ok := parseInt(c); ok && n > 0 && n <= 3600 {
			for _, d := range []int64{-501, -500, 499, 500} {
				add(1000*n + d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// heldTTLAlternatives reruns each uniform state of base that holds a lock
// key with every held key at each remaining TTL of heldTTLs. In the
// long-held analysis (longheld.go) it reruns every judged state and every
// probe checkAux checked, base's being those whose held keys had more time
// left than any argument.
func (a *analysis) heldTTLAlternatives(sem *Semantics, f *finding, v *verdict, base []judged, others []*obs) error {
	if a.longHeld {
		base, others = v.judged, auxProbes(f, others)
	} else {
		others = nil
	}
	held := heldStates(base)
	if len(held) == 0 {
		return nil
	}
	set := constTTLs(sem)
	defer func() { a.cache = map[string]*obs{} }()
	for _, ms := range a.heldTTLs() {
		if slices.Contains(set, ms) {
			continue
		}
		with := fmt.Sprintf("with the held lock's remaining TTL at %dms", ms)
		if err := a.heldTTLRerun(sem, f, v, held, others, ms, with); err != nil {
			return err
		}
	}
	return nil
}

// heldTTLRerun reruns the judged states held and the probes others with
// every held key at ms left.
func (a *analysis) heldTTLRerun(sem *Semantics, f *finding, v *verdict, held []judged, others []*obs, ms int64, with string) error {
	for _, j := range held {
		s := j.o.s
		s.pttl = ms
		if err := a.sameWith(sem, f, j, s, with, false); err != nil {
			return err
		}
	}
	for _, o := range others {
		s := o.s
		s.pttl = ms
		r, err := a.probeOnce(s)
		if errors.Is(err, errRestart{}) {
			return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: with + " the script reads other arguments"}
		}
		if err != nil {
			return err
		}
		if err := a.newCommandArg(sem, r, with); err != nil {
			return err
		}
		if err := a.auxCheck(sem, f, v, r, with+" "); err != nil {
			return err
		}
	}
	return nil
}

// heldStates are the states of base that hold a key.
func heldStates(base []judged) []judged {
	var held []judged
	for _, j := range base {
		for _, k := range j.o.s.keys {
			if k.h != absent {
				held = append(held, j)
				break
			}
		}
	}
	return held
}

// auxProbes are the probes of others that checkAux checks and that hold a
// key by the lock's token or by another client's: one held by an argument
// that is not the token is held by another client too (a candidate token
// of the lock's search), and costs as many runs again.
func auxProbes(f *finding, others []*obs) []*obs {
	var out []*obs
	for _, o := range others {
		if auxChecked(f, o) && o.s.keys[0].h != absent && (o.s.token < 0 || o.s.token == f.token) {
			out = append(out, o)
		}
	}
	return out
}

// constTTLs are the constant TTLs the script sets, in ms: a remaining TTL
// equal to one would make its write look like no change of expiry.
func constTTLs(sem *Semantics) []int64 {
	var set []int64
	for _, t := range append(ttlList(sem.TTL), sem.OtherTTLs...) {
		if t.Arg.IsZero() {
			set = append(set, t.Const.Milliseconds())
		}
	}
	return set
}
