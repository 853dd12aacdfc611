package analyze

import (
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
	seen := map[int64]bool{}
	var out []int64
	add := func(n int64) {
		if n > 0 && n < heldPTTL(0) && !seen[n] && len(out) < maxHeldTTLs {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, n := range heldTTLLadder {
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
// key with every held key at each remaining TTL of heldTTLs.
func (a *analysis) heldTTLAlternatives(sem *Semantics, f *finding, base []judged) error {
	var held []judged
	for _, j := range base {
		for _, k := range j.o.s.keys {
			if k.h != absent {
				held = append(held, j)
				break
			}
		}
	}
	if len(held) == 0 {
		return nil
	}
	// A remaining TTL equal to a constant TTL the script sets would make
	// its write look like no change of expiry: not tried.
	var set []int64
	for _, t := range append(ttlList(sem.TTL), sem.OtherTTLs...) {
		if t.Arg.IsZero() {
			set = append(set, t.Const.Milliseconds())
		}
	}
	defer func() { a.cache = map[string]*obs{} }()
	for _, ms := range a.heldTTLs() {
		if slices.Contains(set, ms) {
			continue
		}
		for _, j := range held {
			s := j.o.s
			s.pttl = ms
			if err := a.sameWith(sem, f, j, s, fmt.Sprintf("with the held lock's remaining TTL at %dms", ms), false); err != nil {
				return err
			}
		}
	}
	return nil
}
