package analyze

import (
	"fmt"
	"time"
)

// ttlOf says where the expiry a run left on key k comes from: an argument
// read in some unit, the argument plus the key's remaining TTL, or a
// constant relative to now. set is false when the run left the key's expiry
// as it was (or the key absent); a key written without expiry, and an
// absolute time that is no argument, are refused.
func (a *analysis) ttlOf(o *obs, k string) (TTL, bool, *Refusal) {
	pre, post := o.o.pre[k], o.o.r.db[k]
	key := argOf(o.o.r.pos(k), a.nkeys)
	switch {
	case post == nil:
		return TTL{}, false, nil
	case pre != nil && post.exp == pre.exp:
		return TTL{}, false, nil
	case post.exp == 0:
		return TTL{}, false, &Refusal{Class: ClassBehaviour, Probe: o.name, Arg: key.String(),
			Reason: fmt.Sprintf("the script leaves %s without an expiry, which no max_ttl can bound", key)}
	}
	t := TTL{Key: key}
	if o.moved[k] {
		rel := post.exp - o.nowMS
		for i := range a.vals {
			n, ok := a.probeNumber(i)
			if !ok {
				continue
			}
			t.Arg = argOf(i, a.nkeys)
			switch {
			case rel == n:
				t.Unit = Millis
				return t, true, nil
			case rel == 1000*n:
				t.Unit = Seconds
				return t, true, nil
			case pre != nil && pre.exp != 0 && rel == n+pre.exp-o.nowMS:
				t.Unit, t.AddsRemaining = Millis, true
				return t, true, nil
			case pre != nil && pre.exp != 0 && rel == 1000*(n+ttlSeconds(pre.exp-o.nowMS)):
				// EXPIRE of TTL + the argument (@upstash/lock's extend):
				// additive in seconds, with TTL's rounding. Unmatched, the
				// expiry read as a constant that differs with every probe
				// value, and the script was refused for a reason that
				// was not its own.
				t.Unit, t.AddsRemaining = Seconds, true
				return t, true, nil
			}
		}
		return TTL{Key: key, Const: time.Duration(rel) * time.Millisecond}, true, nil
	}
	for i := range a.vals {
		n, ok := a.probeNumber(i)
		if !ok {
			continue
		}
		t.Arg = argOf(i, a.nkeys)
		switch post.exp {
		case n:
			t.Unit = UnixMillis
			return t, true, nil
		case 1000 * n:
			t.Unit = UnixSecs
			return t, true, nil
		}
	}
	return TTL{}, false, &Refusal{Class: ClassClock, Probe: o.name, Arg: key.String(),
		Reason: fmt.Sprintf("the script sets %s to expire at a fixed time that is no argument", key)}
}

// ttlSeconds is what TTL answers for a key with left ms to live: Redis
// rounds to the nearest second.
func ttlSeconds(left int64) int64 { return (left + 500) / 1000 }

// probeNumber is argument i's distinct probe number, if it holds one: not
// the SELECT argument's "0", nor one of the script's own constants tried as
// an alternative value, which a constant TTL would match by chance.
func (a *analysis) probeNumber(i int) (int64, bool) {
	if a.vals[i] != argValue(i) {
		return 0, false
	}
	return parseInt(a.vals[i])
}

// addTTL appends t to ts unless an equal TTL is there, merging the
// additive flag: the same argument sometimes plus the remaining TTL.
func addTTL(ts []TTL, t TTL) []TTL {
	for i, x := range ts {
		y := t
		y.AddsRemaining = x.AddsRemaining
		if x == y {
			ts[i].AddsRemaining = x.AddsRemaining || t.AddsRemaining
			return ts
		}
	}
	return append(ts, t)
}
