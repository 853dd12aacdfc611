package analyze

import "strings"

// A fencing counter's value is handed out by lockproxy only where it puts
// the quorum max-register's value instead: the one integer place of the
// reply that Counter.At names. Finding that place by matching values (the
// counter's new value seen in the reply) misses every other way one
// master's value can still reach the client or a lock: a second copy
// ({1, token, tostring(token)}), a nested array ({1, {token}}), a string
// or status built from it ("fence:" .. token), a value computed from it
// (token + 1), a GET of the counter, a second counter; or the value
// stored in the lock itself (ioredfour keeps it in a hash field as the
// lock's token, which then differs from master to master). So each
// counter is also checked by difference: a yes probe runs again with the
// counter at another value, and the two runs must make the same commands
// with the same arguments and answer the same reply but in that one place,
// which must then hold the new value (review, helper-51 and helper-53).

// Counter.At values for the difference check's refusals.
const (
	// CounterDerived: the reply differs elsewhere with the counter's
	// value (a copy, a string, a nested array, a computed value).
	CounterDerived = -3
	// CounterStored: the value goes into another command (stored in a
	// lock or another key, or compared with something).
	CounterStored = -4
	// CounterDown: the script lowers it (DECR, a negative INCRBY): each
	// grant takes every master's value down by what lockproxy's
	// max-register then adds, and two grants in a row get one token.
	CounterDown = -5
)

// counterBump is how much higher the counter stands in the second run:
// far from anything a probe writes.
const counterBump = 7000000000

// counterDiff checks counter key (at its place at, or -1 when its value
// is not returned) by difference, on every probe that incremented it (a
// branch taken only for some argument's value must be checked too): the
// probe runs again, uncached, with the counter standing counterBump
// higher when the script increments it. It returns at, or CounterDerived
// or CounterStored.
func (a *analysis) counterDiff(obs []*obs, key Arg, at int) int {
	for _, o := range obs {
		ci := -1
		for i, c := range o.o.r.calls {
			if isCounterCall(c) && argOf(o.o.r.pos(c.args[1]), a.nkeys) == key {
				ci = i
				break
			}
		}
		if ci < 0 || o.o.err != "" {
			continue
		}
		if goesDown(o.o.r.calls[ci]) && at >= 0 {
			return CounterDown
		}
		name := o.o.r.calls[ci].args[1]
		o2, err := a.runProbe(o.name+" (counter higher)", o.s, []int64{clockA, clockB}, map[string]int64{name: counterBump})
		if err != nil || o2.o.err != "" || len(o2.o.r.calls) != len(o.o.r.calls) {
			return CounterStored
		}
		for i, c := range o.o.r.calls {
			if strings.Join(c.args, "\x00") != strings.Join(o2.o.r.calls[i].args, "\x00") {
				return CounterStored
			}
		}
		v2 := o2.o.r.calls[ci].reply
		if at < 0 {
			if !o2.o.reply.Equal(o.o.reply) {
				return CounterDerived
			}
			continue
		}
		if !sameButAt(o.o.reply, o2.o.reply, at, v2) {
			return CounterDerived
		}
	}
	return at
}

// sameButAt reports whether y is x with its at-th element (0: the whole
// reply) replaced by the counter's value v.
func sameButAt(x, y Reply, at int, v Reply) bool {
	if v.Type != IntReply {
		return false
	}
	if at == 0 {
		return y.Type == IntReply && y.Int == v.Int
	}
	if x.Type != ArrayReply || y.Type != ArrayReply || len(x.Elems) != len(y.Elems) || at > len(x.Elems) {
		return false
	}
	for i := range x.Elems {
		if i == at-1 {
			if y.Elems[i].Type != IntReply || y.Elems[i].Int != v.Int {
				return false
			}
			continue
		}
		if !x.Elems[i].Equal(y.Elems[i]) {
			return false
		}
	}
	return true
}

// countersWith checks the counters of sem again on o, a rerun with an
// alternative value (alternatives.go): a branch taken only for one
// argument's value ({1, token, token} when ARGV[3] is "x") must keep the
// counter in its place too (review, helper-54). A failed check marks the
// counter for the catalog's refusal.
func (a *analysis) countersWith(sem *Semantics, o *obs) {
	for i := range sem.Counters {
		c := &sem.Counters[i]
		at := -1
		if c.Returned {
			if c.At < 0 {
				continue // refused already
			}
			at = c.At
		}
		if d := a.counterDiff([]*obs{o}, c.Key, at); d < -1 {
			c.Returned, c.At = true, d
		}
	}
}

// refusedCounters carries the refusals the alternatives found (alt) over
// to the counters of the combined semantics.
func refusedCounters(cs, alt []Counter) []Counter {
	out := append([]Counter(nil), cs...)
	for _, c := range alt {
		if c.At >= CounterMoves {
			continue
		}
		found := false
		for i := range out {
			if out[i].Key == c.Key {
				out[i].Returned, out[i].At, found = true, c.At, true
			}
		}
		if !found {
			out = append(out, c)
		}
	}
	return out
}

// goesDown reports whether an INCR-family call lowers its counter.
func goesDown(c call) bool {
	if strings.HasPrefix(c.name, "decr") {
		return true
	}
	if len(c.args) < 3 {
		return false
	}
	by, ok := parseInt(c.args[2])
	return !ok || by < 0
}
