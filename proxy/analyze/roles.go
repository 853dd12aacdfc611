package analyze

import (
	"fmt"
	"sort"
	"strconv"
)

// The probe values are 13-digit numbers, for every argument: the lock's TTL
// argument is probed at about 1.8e12 ms and the token is 13 bytes long. A
// script may branch on the values clients really send, clamping or
// shrinking a TTL below a threshold, or taking a lock with no expiry for a
// long token, and no probe would show it. roleAlternatives reruns the
// uniform states with the TTL argument at realistic values, and refuses a
// script that then treats the lock otherwise (tokens and keys of other
// contents: content.go).

// ttlLadder are the TTL argument's values tried, besides the script's own
// numeric constants and their neighbours: from the shortest lock to an
// hour, around the usual round figures.
var ttlLadder = []int64{1, 2, 3, 10, 99, 100, 101, 999, 1000, 1001, 5000, 9999, 10000, 10001, 30000, 60000, 100000, 3600000}

// maxTTLAlternatives bounds the TTL values tried.
const maxTTLAlternatives = 48

// roleAlternatives tries the lock's TTL argument with the values above; f
// and base are the lock and the uniform states of alternatives. The token
// and the keys are tried by contentAlternatives (content.go).
func (a *analysis) roleAlternatives(sem *Semantics, f *finding, base []judged) error {
	saved := append([]string(nil), a.vals...)
	defer func() { a.vals, a.cache = saved, map[string]*obs{} }()
	if t := sem.TTL; t != nil && !t.Arg.IsZero() && (t.Unit == Millis || t.Unit == Seconds) {
		p := a.posOf(t.Arg)
		for _, n := range a.ttlValues() {
			a.vals = append([]string(nil), saved...)
			a.vals[p] = strconv.FormatInt(n, 10)
			a.cache = map[string]*obs{}
			for _, j := range base {
				if err := a.sameTTL(sem, f, j, n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ttlValues are ttlLadder and each positive numeric constant of the script
// with its neighbours, sorted, at most maxTTLAlternatives.
func (a *analysis) ttlValues() []int64 {
	seen := map[int64]bool{}
	var out []int64
	add := func(n int64) {
		if n > 0 && !seen[n] && len(out) < maxTTLAlternatives {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, n := range ttlLadder {
		add(n)
	}
	for _, c := range a.consts {
		if n, ok := parseInt(c); ok {
			add(n - 1)
			add(n)
			add(n + 1)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// addedRemaining is the remaining TTL an additive extend adds, in ms: as
// PTTL reads it, or as TTL does (whole seconds, rounded) for one in seconds.
func addedRemaining(u Unit, left int64) int64 {
	if u == Seconds {
		return 1000 * ttlSeconds(left)
	}
	return left
}

// sameTTL reruns judged state j with the lock's TTL argument at n: the
// script must do to the lock what it did with the probe value, or decline
// (a no or an error that writes no lock key), and every lock key it sets
// must expire after n in the TTL's unit (plus the remaining TTL, for an
// additive extend).
func (a *analysis) sameTTL(sem *Semantics, f *finding, j judged, n int64) error {
	with := fmt.Sprintf("with %s = %d", sem.TTL.Arg, n)
	o, declined, err := a.rerun(sem, f, f, j, j.o.s, with, false)
	if err != nil || declined {
		return err
	}
	ms := n
	if sem.TTL.Unit == Seconds {
		ms = 1000 * n
	}
	for _, k := range f.keys {
		name := a.vals[k]
		pre, post := o.o.pre[name], o.o.r.db[name]
		switch {
		case post == nil, pre != nil && post.exp == pre.exp:
			continue // not written, or its expiry left alone
		case post.exp == 0:
			return &Refusal{Class: ClassBehaviour, Probe: o.name, Arg: posName(k, a.nkeys),
				Reason: fmt.Sprintf("%s the script leaves %s without an expiry, which no max_ttl can bound", with, posName(k, a.nkeys))}
		}
		rel := post.exp - o.nowMS
		if rel == ms || (sem.TTL.AddsRemaining && pre != nil && pre.exp != 0 && rel == ms+addedRemaining(sem.TTL.Unit, pre.exp-o.nowMS)) {
			continue
		}
		return &Refusal{Class: ClassBehaviour, Probe: o.name, Arg: posName(k, a.nkeys),
			Reason: fmt.Sprintf("%s the script sets %s to expire after %dms, not after the %dms that argument asks for: the lock's TTL is not that argument for every value", with, posName(k, a.nkeys), rel, ms)}
	}
	return nil
}
