package analyze

import (
	"strings"
)

// Scripts guarded by the lock's remaining TTL. Some extend (or release)
// scripts first compare the key's PTTL with an argument and do nothing
// when too little is left (redlock-universal's ATOMIC_EXTEND: `if
// current_ttl < tonumber(ARGV[2]) then return {0, current_ttl} end`, then
// the token check). The probes hold keys with a PTTL below every
// argument's probe value, so such a script never reaches its token check
// and is refused. When a script that reads a TTL is refused for its
// behaviour, it is analyzed once more with held keys' PTTLs above every
// argument, and that verdict is taken only if, with the usual PTTLs, the
// script leaves every held lock exactly as it was and answers no: the
// guard only ever turns the lock operation into a refusal, which the
// quorum counts as a no vote (the lock keeps its old expiry, or stays
// until its TTL). Acquisitions are not concerned (a free key has no TTL).

// readsTTL reports whether the script's constants name a TTL read.
func readsTTL(consts []string) bool {
	for _, c := range consts {
		switch strings.ToLower(c) {
		case "pttl", "ttl", "pexpiretime", "expiretime":
			return true
		}
	}
	return false
}

// ttlGuarded returns the verdict with long-held probe states when it
// applies (see above), or nil.
func ttlGuarded(opt Options, b *budget, v *vm, consts []string) *Semantics {
	long := &analysis{opt: opt, b: b, v: v, consts: consts, longHeld: true}
	sem, err := long.analyze()
	if err != nil {
		return nil
	}
	switch sem.Kind {
	case Extend, Release, Read:
	default:
		return nil
	}
	short := &analysis{opt: opt, b: b, v: v, consts: consts, nkeys: sem.MinKeys, nargs: sem.MinArgs, dbArg: sem.DBArg,
		cache: map[string]*obs{}}
	short.vals = make([]string, short.nkeys+short.nargs)
	for i := range short.vals {
		short.vals[i] = argValue(i)
		if argOf(i, short.nkeys) == short.dbArg {
			short.vals[i] = "0"
		}
	}
	if !short.guardRefuses(sem) {
		return nil
	}
	sem.TTLGuard = true
	return sem
}

// guardRefuses reports whether, with the usual held PTTLs, the script
// leaves the lock keys held by the caller, and by another client, exactly
// as they were, writes nothing else, and answers no by sem's rule.
func (a *analysis) guardRefuses(sem *Semantics) bool {
	form := map[Form]keyType{FormString: typeString, FormHash: typeHash, FormZSet: typeZSet, FormAny: typeString}[sem.Form]
	if form == 0 {
		form = typeString
	}
	for _, h := range []holder{byCaller, byOther} {
		s := probeState{token: -1}
		switch {
		case !sem.Tokenless:
			s.token = a.posOf(sem.Token.Arg)
		default:
			s.tok = sem.Token.Const
		}
		for _, k := range sem.LockKeys {
			s.keys = append(s.keys, keySpec{pos: a.posOf(k), h: h, f: form})
		}
		o, err := a.probeOnce(s)
		if err != nil || o.o.err != "" || sem.Yes.Match(&o.o.reply, a.nkeys) {
			return false
		}
		after := o.o.r.db
		if len(after) != len(o.o.pre) {
			return false
		}
		for name, e := range o.o.pre {
			if f := after[name]; !sameEntry(e, f, 0) || f.exp != e.exp {
				return false
			}
		}
	}
	return true
}
