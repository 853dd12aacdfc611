package analyze

import (
	"fmt"
	"strings"
)

// effect is what one run did to one lock key, relative to the caller's token.
type effect uint8

const (
	effNone  effect = iota // left exactly as it was
	effGone                // the caller's hold removed (the key deleted, or its field or member)
	effTake                // now held by the caller where it was not
	effRenew               // held by the caller before and after, its expiry or score re-set
	effInc                 // a hash lock's count of the caller's token + 1
	effDec                 // the same - 1, still held
	effOther               // anything else: another holder's data changed, a second holder added…
)

var effectNames = [...]string{"left it", "removed the caller's hold", "took it", "re-set its TTL",
	"added 1 to the caller's count", "took 1 from the caller's count", "changed it otherwise"}

func (e effect) String() string { return effectNames[e] }

// heldBy reports whether e is held by token value tv.
func (f *finding) heldBy(e *entry, tv string) bool {
	if e == nil {
		return false
	}
	switch e.typ {
	case typeString:
		return e.str == tv || (f.embedded && strings.Contains(e.str, tv))
	case typeHash:
		_, ok := e.hget(tv)
		return ok
	case typeZSet:
		_, ok := e.zscore(tv)
		return ok
	}
	return false
}

// heldByOthers reports whether e holds anything that is not token tv's.
func (f *finding) heldByOthers(e *entry, tv string) bool {
	if e == nil {
		return false
	}
	switch e.typ {
	case typeHash:
		for _, x := range e.hash {
			if x.f != tv {
				return true
			}
		}
	case typeZSet:
		for _, m := range e.zset {
			if m.m == otherToken || m.m == otherToken2 || m.m == otherWord || m.m == otherWord2 {
				return true
			}
		}
	default:
		return !f.heldBy(e, tv)
	}
	return false
}

// effectOn classifies what a run did to lock key k.
func (f *finding) effectOn(o *obs, k string) effect {
	pre, post := o.o.pre[k], o.o.r.db[k]
	switch {
	case pre == nil && post == nil:
		return effNone
	case pre != nil && post != nil && sameEntry(pre, post, 0) && pre.exp == post.exp:
		return effNone
	}
	if f.form == 0 { // a lock without token: only deleting counts
		if post == nil {
			return effGone
		}
		return effOther
	}
	tv := f.tok
	inPre, inPost := f.heldBy(pre, tv), f.heldBy(post, tv)
	others := f.heldByOthers(pre, tv) && f.heldByOthers(post, tv) && pre.typ != typeString
	switch {
	case !inPre && inPost && !others && post.typ == f.form:
		return effTake
	case inPre && !inPost:
		return effGone
	case inPre && inPost && pre.typ == typeHash:
		a, _ := pre.hget(tv)
		b, _ := post.hget(tv)
		na, _ := parseInt(a)
		nb, _ := parseInt(b)
		switch nb - na {
		case 1:
			return effInc
		case -1:
			return effDec
		case 0:
			return effRenew
		}
	case inPre && inPost:
		return effRenew
	}
	return effOther
}

// effects returns the effect of an outcome on each lock key.
func (a *analysis) effects(f *finding, o *obs) []effect {
	out := make([]effect, len(f.keys))
	for i, k := range f.keys {
		out[i] = f.effectOn(o, a.vals[k])
	}
	return out
}

// judged is one own-form probe with what the kind expects of it.
type judged struct {
	o   *obs
	yes bool
}

// verdict is the kind a layout's probes show, with every probe judged.
type verdict struct {
	kind    Kind
	force   bool
	s0      *obs
	holders *obs     // the state where the caller holds every lock key
	contend *obs     // the state where other tokens hold every lock key
	judged  []judged // own-form states, with their expected verdict
	aux     []*obs   // states of other keys and other forms
}

// kindOf reads the kind from the effects of the uniform states: all
// absent, all held by the caller, re-entered (hash).
func kindOf(e0, ec, er effect, hash bool) (Kind, bool) {
	switch {
	case e0 == effTake && ec == effNone:
		return Acquire, true
	case e0 == effTake && ec == effRenew:
		return AcquireOrExtend, true
	case e0 == effTake && ec == effInc && hash && er == effInc:
		return ReentrantAcquire, true
	case e0 == effNone && ec == effGone && hash && er == effDec:
		return ReentrantRelease, true
	case e0 == effNone && ec == effGone && (!hash || er == effGone):
		return Release, true
	case e0 == effNone && ec == effRenew && (!hash || er == effRenew):
		return Extend, true
	case e0 == effNone && ec == effNone && (!hash || er == effNone):
		return Read, true
	}
	return 0, false
}

// uniformEffect is the effect a state had on every lock key, or an error
// when the keys fared differently.
func (a *analysis) uniformEffect(f *finding, o *obs) (effect, error) {
	es := a.effects(f, o)
	for i, e := range es {
		if e != es[0] {
			return 0, &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("the script %s to %s but %s to %s: not one lock, all or nothing",
				es[0], posName(f.keys[0], a.nkeys), e, posName(f.keys[i], a.nkeys))}
		}
	}
	return es[0], nil
}

// errored refuses a probe of the lock's own form that ended in an error:
// the script failed where it should have decided.
func (a *analysis) errored(o *obs) error {
	if o.o.err == "" {
		return nil
	}
	return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: "the script raised an error: " + a.named(o.o.err)}
}

// named replaces the probe values in a text (an error message) by the
// arguments they stand for.
func (a *analysis) named(text string) string {
	for i := len(a.vals) - 1; i >= 0; i-- {
		if len(a.vals[i]) > 1 {
			text = strings.ReplaceAll(text, a.vals[i], posName(i, a.nkeys))
		}
	}
	return text
}
