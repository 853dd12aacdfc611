package analyze

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ttls finds the lock's TTL (every yes of an acquire or extend sets it, from
// one argument in one unit) and every other expiry any probe set.
func (a *analysis) ttls(sem *Semantics, f *finding, v *verdict) error {
	timed := sem.Kind.Acquires() || sem.Kind == Extend
	lockTTL := func(t TTL) bool {
		return sem.TTL != nil && t.Arg == sem.TTL.Arg && t.Unit == sem.TTL.Unit && t.Const == sem.TTL.Const && contains(f.keys, a.posOf(t.Key))
	}
	if timed {
		for _, j := range v.judged {
			if !j.yes {
				continue
			}
			for _, k := range f.keys {
				if e := f.effectOn(j.o, a.vals[k]); e != effTake && e != effRenew && e != effInc {
					continue
				}
				t, set, ref := a.ttlOf(j.o, a.vals[k])
				switch {
				case ref != nil:
					return ref
				case !set:
					return &Refusal{Class: ClassBehaviour, Probe: j.o.name, Arg: posName(k, a.nkeys), Reason: "the script answers yes without setting the lock's TTL"}
				case sem.TTL == nil:
					t.Key = sem.LockKeys[0]
					sem.TTL = &t
				case t.Arg != sem.TTL.Arg || t.Unit != sem.TTL.Unit || t.Const != sem.TTL.Const:
					return &Refusal{Class: ClassBehaviour, Probe: j.o.name, Reason: fmt.Sprintf("the lock's TTL comes from %s here and from %s elsewhere", t, sem.TTL)}
				default:
					sem.TTL.AddsRemaining = sem.TTL.AddsRemaining || t.AddsRemaining
				}
			}
		}
	}
	all := append(a.judgedObs(v), a.others(v)...)
	for _, o := range all {
		for _, name := range o.o.r.db.names() {
			t, set, ref := a.ttlOf(o, name)
			if ref != nil && !incremented(o, name) {
				if contains(f.keys, o.o.r.pos(name)) && !a.ownForm(o, f) {
					continue // a lock key of another type, left as it was found
				}
				return ref
			}
			if set && !(timed && lockTTL(t)) {
				sem.OtherTTLs = addTTL(sem.OtherTTLs, t)
			}
		}
	}
	return nil
}

func (a *analysis) judgedObs(v *verdict) []*obs {
	out := make([]*obs, len(v.judged))
	for i, j := range v.judged {
		out[i] = j.o
	}
	return out
}

// ownForm reports whether o's lock keys were held in the lock's own form.
func (a *analysis) ownForm(o *obs, f *finding) bool {
	for _, k := range o.s.keys {
		if contains(f.keys, k.pos) && k.f != f.form {
			return false
		}
	}
	return true
}

// incremented reports whether the run counted on key k with INCR and the
// like: a fencing counter, which lives without expiry by design.
func incremented(o *obs, k string) bool {
	for _, c := range o.o.r.calls {
		if isCounterCall(c) {
			if c.args[1] == k {
				return true
			}
		}
	}
	return false
}

// isCounterCall reports whether c is INCR, INCRBY, DECR or DECRBY (the
// model's incr; INCRBYFLOAT is not modelled).
func isCounterCall(c call) bool {
	return strings.HasPrefix(c.name, "incr") || strings.HasPrefix(c.name, "decr")
}

// countersReturned reports whether some probe's reply is the new value of a
// counter it incremented (the reply itself: one element of an array, as
// Redisson's RFencedLock answers, leaves the rest to say yes or no).
func (a *analysis) countersReturned(f *finding, v *verdict) bool {
	cs := a.counters(v)
	return len(cs) > 0 && cs[0].Returned && cs[0].At == 0
}

func (a *analysis) counters(v *verdict) []Counter {
	seen := map[Arg]*Counter{}
	var order []Arg
	for _, o := range append(a.judgedObs(v), a.others(v)...) {
		for _, c := range o.o.r.calls {
			if !isCounterCall(c) {
				continue
			}
			key := argOf(o.o.r.pos(c.args[1]), a.nkeys)
			if seen[key] == nil {
				seen[key] = &Counter{Key: key}
				order = append(order, key)
			}
			if c.reply.Type != IntReply || c.reply.Int <= 1 {
				continue
			}
			at := -1
			switch rep := o.o.reply; {
			case rep.Type == IntReply && rep.Int == c.reply.Int:
				at = 0
			case rep.Type == BulkReply && rep.Str == formatInt(c.reply.Int):
				at = CounterAsString
			case rep.Type == ArrayReply:
				for i, e := range rep.Elems {
					if e.Type == IntReply && e.Int == c.reply.Int {
						at = i + 1
						break
					}
					if e.Type == BulkReply && e.Str == formatInt(c.reply.Int) {
						at = CounterAsString
						break
					}
				}
			}
			switch s := seen[key]; {
			case s.At == CounterAsString:
			case at == CounterAsString:
				// The value as a string would reach the client as one
				// master's: lockproxy replaces integers only (review, helper-50).
				s.Returned, s.At = true, CounterAsString
			case at < 0:
			case !s.Returned:
				s.Returned, s.At = true, at
			case s.At != at:
				s.At = CounterMoves // one place here, another there
			}
		}
	}
	obs := append(a.judgedObs(v), a.others(v)...)
	out := make([]Counter, len(order))
	for i, k := range order {
		c := seen[k]
		switch {
		case c.Returned && c.At >= 0:
			c.At = a.counterDiff(obs, k, c.At)
		case !c.Returned:
			if d := a.counterDiff(obs, k, -1); d < -1 {
				c.Returned, c.At = true, d // refused (catalog)
			}
		}
		out[i] = *c
	}
	return out
}

// undo describes how to take back a failed acquisition.
func (a *analysis) undo(sem *Semantics, f *finding, v *verdict) error {
	if !sem.Kind.Acquires() {
		return nil
	}
	sem.NoIsNoop = true
	for _, j := range v.judged {
		for _, e := range a.effects(f, j.o) {
			if !j.yes && e != effNone {
				sem.NoIsNoop = false
			}
		}
	}
	u := &Undo{Token: sem.Token}
	switch f.form {
	case typeString:
		u.Op = UndoDelIfValue
		if f.embedded {
			field, err := jsonField(f.tmpl[f.keys[0]], f.tok)
			if err != nil {
				return err
			}
			u.JSONField = field
		}
	case typeHash:
		u.Op = UndoHashDecr
	case typeZSet:
		u.Op = UndoZRem
		u.Members = []Value{sem.Token}
		if t := f.tmpl[f.keys[0]]; t != nil {
			for _, m := range t.zset {
				if m.m != tokenMark {
					u.Members = append(u.Members, a.valueOf(m.m))
				}
			}
		}
	}
	sem.Undo = u
	return nil
}

// jsonField finds the field of a JSON object value that holds the token.
func jsonField(t *entry, tok string) (string, error) {
	var obj map[string]any
	if t != nil && json.Unmarshal([]byte(fromTemplate(t, tok, 0).str), &obj) == nil {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s, ok := obj[k].(string); ok && s == tok {
				return k, nil
			}
		}
	}
	return "", &Refusal{Class: ClassBehaviour, Reason: "the lock's value embeds the token in a form the undo cannot compare (only a JSON object field is understood)"}
}

// valueOf names a string by the argument it is, else as a constant.
func (a *analysis) valueOf(s string) Value {
	for i, v := range a.vals {
		if v == s {
			return Value{Arg: argOf(i, a.nkeys)}
		}
	}
	return Value{Const: s}
}

// templateOf is valueOf for a message the script formats from its
// arguments (simple-redis-mutex publishes `{ "key": "<KEYS[1]>", … }`):
// the arguments' probe values in it are written as their names, so that it
// reads the same whatever values the layout gave them.
func (a *analysis) templateOf(s string) Value {
	v := a.valueOf(s)
	if !v.Arg.IsZero() {
		return v
	}
	for i, val := range a.vals {
		if len(val) >= 6 { // the distinct probe numbers, not a "0" SELECT takes
			v.Const = strings.ReplaceAll(v.Const, val, "${"+argOf(i, a.nkeys).String()+"}")
		}
	}
	return v
}
