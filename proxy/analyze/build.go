package analyze

import (
	"fmt"
	"sort"
	"strings"
)

// layoutResult is what one layout (a number of KEYS and ARGV) showed.
type layoutResult struct {
	sem *Semantics
	f   *finding
	v   *verdict
	// The layout itself, for a batch analysis after the next one failed.
	nkeys, nargs int
	vals         []string
	dbArg        Arg
}

// layout analyzes the script with the current KEYS and ARGV.
func (a *analysis) layout() (*layoutResult, error) {
	s0, err := a.probe(probeState{token: -1})
	if err != nil {
		return nil, err
	}
	if s0.o.err != "" && len(touched(s0.o)) == 0 {
		return nil, &Refusal{Class: ClassBehaviour, Probe: s0.name, Reason: "the script fails before it touches a key: " + a.named(s0.o.err)}
	}
	f, err := a.find(s0)
	if err != nil {
		return nil, err
	}
	v, err := a.judge(f)
	if err != nil {
		return nil, err
	}
	sem, err := a.semantics(f, v)
	if err != nil {
		return nil, err
	}
	return &layoutResult{sem: sem, f: f, v: v}, nil
}

// semantics turns a verdict into the engine's description.
func (a *analysis) semantics(f *finding, v *verdict) (*Semantics, error) {
	sem := &Semantics{Kind: v.kind, Force: v.force, MinKeys: a.nkeys, MinArgs: a.nargs, DBArg: a.dbArg,
		Form: map[keyType]Form{0: FormAny, typeString: FormString, typeHash: FormHash, typeZSet: FormZSet}[f.form]}
	for _, k := range f.keys {
		sem.LockKeys = append(sem.LockKeys, argOf(k, a.nkeys))
	}
	switch {
	case !f.tokenless:
		sem.Token = Value{Arg: f.tokArg}
	case f.form != 0:
		sem.Token, sem.Tokenless = Value{Const: f.tok}, true
	default:
		sem.Tokenless = true
	}
	if !f.tokenless {
		sem.Constants = a.strs
	}
	if f.embedded && !f.tokenless && f.form == typeString && len(f.keys) > 0 {
		if field, err := jsonField(f.tmpl[f.keys[0]], f.tok); err == nil {
			sem.TokenField = field
		}
	}
	if err := a.replies(sem, f, v); err != nil {
		return nil, err
	}
	a.deletedReply(sem, f, v)
	if err := a.checkAux(sem, f, v); err != nil {
		return nil, err
	}
	if err := a.ttls(sem, f, v); err != nil {
		return nil, err
	}
	if err := a.undo(sem, f, v); err != nil {
		return nil, err
	}
	a.reportEffects(sem, f, v)
	return sem, nil
}

// replies infers the yes rule and the client's reply after a lost vote.
func (a *analysis) replies(sem *Semantics, f *finding, v *verdict) error {
	var yes, no []Reply
	ttlReplies, secReplies := sem.Kind == Read, sem.Kind == Read
	for _, j := range v.judged {
		if j.yes {
			yes = append(yes, j.o.o.reply)
			r, pttl := j.o.o.reply, a.minPTTL(f, j.o)
			ttlReplies = ttlReplies && r.Type == IntReply && r.Int == pttl
			// TTL's seconds, rounded as Redis rounds them (aioredlock).
			secReplies = secReplies && r.Type == IntReply && pttl >= 0 && r.Int == (pttl+500)/1000
		} else {
			no = append(no, j.o.o.reply)
		}
	}
	// Yes integers carry data when they are a PTTL (in ms, or a TTL in
	// seconds: then no single value is the rule, and the client hears the
	// most common, not a drift-corrected one), a counter's value, or
	// simply differ: then no single value is the rule.
	data := ttlReplies || secReplies || a.countersReturned(f, v)
	for _, r := range yes {
		data = data || r.Type != yes[0].Type || r.Int != yes[0].Int
	}
	// A yes string that carries an argument (the token, or a name built
	// from one: Laravel's funnel answers ARGV[1]..index) is data too: its
	// exact probe text is no rule, as it differs with every call.
	strData := a.repliesCarryArgs(yes)
	if sem.Kind == Release && len(yes) > 0 && sameReplies(append(yes, no...)) {
		// A release that answers the same whether it deleted or not
		// (simple-redis-mutex returns nothing): every master's answer
		// counts, and the client hears that answer, as from one Redis.
		// Safe: what it deletes is the caller's alone, whatever it says.
		rule, err := inferYes(yes, nil, data, strData)
		if err != nil {
			return err
		}
		sem.Yes, sem.No, sem.SameReply = rule, NoReply{Reply: yes[0], PTTLAt: -1}, true
		return nil
	}
	rule, err := inferYes(yes, no, data, strData)
	if err != nil && (sem.Kind == Release || sem.Kind == ReentrantRelease) {
		rule, err = a.absentAnswersYes(sem, f, v, yes, data, strData, err)
	}
	if err != nil {
		return err
	}
	sem.Yes, sem.ReplyIsTTL = rule, ttlReplies
	var src *obs
	for _, o := range []*obs{v.contend, v.s0} {
		if o != nil && !rule.Match(&o.o.reply, a.nkeys) {
			src = o
			break
		}
	}
	if src == nil {
		// Every uniform state answers yes (a force acquire): the client gets
		// the nil SET NX gives, or 0 when nil is the yes.
		sem.No = NoReply{Reply: nilReply, PTTLAt: -1}
		if rule.Type == NilReply {
			sem.No.Reply = intReply(0)
		}
		return nil
	}
	sem.No = noReplyOf(src.o.reply, a.heldPTTL(0))
	if sem.No.PTTLAt >= 0 && rule.Match(&sem.No.Reply, a.nkeys) {
		// A script whose yes is 0 and whose no is the holder's PTTL (a
		// Redisson-style acquire that answers 0 where Redisson answers
		// nil): the placeholder PTTL is 1, the least a holder's PTTL can
		// be when lockproxy answers it (the masters run such a script
		// wrapped so that a last-millisecond PTTL of 0 is answered as 1:
		// proxy/catalog, quorum.WrapZeroPTTL).
		sem.No.setPTTL(1)
	}
	if rule.Match(&sem.No.Reply, a.nkeys) {
		return &Refusal{Class: ClassBehaviour, Probe: src.name, Reason: fmt.Sprintf("the script's no reply %s looks like a yes", sem.No.Reply)}
	}
	return nil
}

// absentAnswersYes is the rule for a release that answers its success
// reply where there is no lock to release (Redisson 2.2.4 to 3.10.5:
// `if redis.call('exists', KEYS[1]) == 0 then publish; return 1 end`),
// which on one Redis tells the client "unlocked" as a release of its own
// lock would: when the rule found without those states' replies tells
// every other no from every yes, a master where the lock is absent votes
// yes. Safe: such a master holds nothing to release and the script left
// the lock absent there; at most N-Q masters lack a lock a quorum holds,
// so a stranger's release still loses the vote. Their reply, which must
// be the one a release that deleted the lock gives, is not enough to
// outnumber by count: with a holder cut off they tie with a quorum's
// count left, so the engine hears it as "released" only when fewer than
// a quorum may still hold the token (AbsentReply; quorum's releaseYes),
// and they answer it without running the script, which must write
// nothing there (quorum.WrapAbsentYes). err is inferYes's refusal with
// every no.
func (a *analysis) absentAnswersYes(sem *Semantics, f *finding, v *verdict, yes []Reply, data, strData bool, err error) (YesRule, error) {
	var held, absent, deleted []Reply
	for _, j := range v.judged {
		if j.yes {
			if a.lockDeletedBy(f, j.o) {
				deleted = append(deleted, j.o.o.reply)
			}
			continue
		}
		if a.lockAbsentThrough(f, j.o) {
			if !writesNothing(j.o) {
				// The masters that lack the lock do not run the script
				// (quorum.WrapAbsentYes): what it writes there would be
				// left undone. Its publications are hints a waiter does
				// without.
				return YesRule{}, err
			}
			absent = append(absent, j.o.o.reply)
		} else {
			held = append(held, j.o.o.reply)
		}
	}
	if len(absent) == 0 || len(held) == 0 {
		return YesRule{}, err
	}
	rule, err2 := inferYes(yes, held, data, strData)
	if err2 != nil || !accepts(&rule, absent, true) || len(deleted) == 0 || !sameReplies(append(absent, deleted...)) {
		// The engine counts the masters that answered that one reply as
		// holding nothing any more (quorum's releaseYes): it must be
		// the reply of a release that deleted the lock, and no other.
		return YesRule{}, err
	}
	sem.AbsentIsYes, sem.AbsentReply = true, absent[0]
	return rule, nil
}

// writesNothing reports whether o's run called no command that writes a
// key (PUBLISH writes none), whatever the keys held.
func writesNothing(o *obs) bool {
	for _, c := range o.o.r.calls {
		if !readOnly[c.name] {
			return false
		}
	}
	return true
}

// lockDeletedBy reports whether some lock key was there before o's run
// and every one is absent after it.
func (a *analysis) lockDeletedBy(f *finding, o *obs) bool {
	before := false
	for _, k := range f.keys {
		before = before || o.o.pre[a.vals[k]] != nil
		if o.o.r.db[a.vals[k]] != nil {
			return false
		}
	}
	return before
}

// lockAbsentThrough reports whether every lock key was absent before o's
// run and after it.
func (a *analysis) lockAbsentThrough(f *finding, o *obs) bool {
	for _, k := range f.keys {
		if o.o.pre[a.vals[k]] != nil || o.o.r.db[a.vals[k]] != nil {
			return false
		}
	}
	return true
}

// sameReplies reports whether every reply is the same.
func sameReplies(rs []Reply) bool {
	for _, r := range rs[1:] {
		if r.String() != rs[0].String() {
			return false
		}
	}
	return true
}

// repliesCarryArgs reports whether a string reply among rs contains the
// probe value of one of the script's arguments (KEYS or ARGV).
func (a *analysis) repliesCarryArgs(rs []Reply) bool {
	for _, r := range rs {
		if r.Type == ArrayReply {
			if a.repliesCarryArgs(r.Elems) {
				return true
			}
			continue
		}
		if r.Type != StatusReply && r.Type != BulkReply {
			continue
		}
		for i := 0; i < a.nkeys+a.nargs; i++ {
			if strings.Contains(r.Str, argValue(i)) {
				return true
			}
		}
	}
	return false
}

// minPTTL is the least remaining TTL of the lock keys before a run.
func (a *analysis) minPTTL(f *finding, o *obs) int64 {
	least := int64(-2)
	for _, k := range f.keys {
		if e := o.o.pre[a.vals[k]]; e != nil && e.exp != 0 && (least < 0 || e.exp-o.nowMS < least) {
			least = e.exp - o.nowMS
		}
	}
	return least
}

// others returns the probes that are not judged states of the lock, in a
// deterministic order.
func (a *analysis) others(v *verdict) []*obs {
	judged := map[*obs]bool{}
	for _, j := range v.judged {
		judged[j.o] = true
	}
	var out []*obs
	for _, o := range a.cache {
		if !judged[o] {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// checkAux checks the probes of other keys and other forms: the lock keys
// are left alone, or treated as with every key absent, and a lock key of
// another type never gets a yes.
func (a *analysis) checkAux(sem *Semantics, f *finding, v *verdict) error {
	if f.form == 0 || (v.force && v.kind == Acquire) {
		return nil // deletes or overwrites whatever is there
	}
	for _, o := range a.others(v) {
		if err := a.auxCheck(sem, f, v, o, ""); err != nil {
			return err
		}
	}
	return nil
}

// auxChecked reports whether o is a probe checkAux checks: one key, not a
// lock key in the lock's own form.
func auxChecked(f *finding, o *obs) bool {
	if len(o.s.keys) != 1 {
		return false
	}
	k := o.s.keys[0]
	return !contains(f.keys, k.pos) || k.f != f.form
}

// auxCheck is checkAux's rule for one probe o; with, when set, says what
// the run changed (longheld.go).
func (a *analysis) auxCheck(sem *Semantics, f *finding, v *verdict, o *obs, with string) error {
	if !auxChecked(f, o) {
		return nil
	}
	lock := contains(f.keys, o.s.keys[0].pos)
	for i, l := range f.keys {
		e := f.effectOn(o, a.vals[l])
		if e != effNone && (lock || e != f.effectOn(v.s0, a.vals[l])) {
			// The probe names the state; the reason says which key and why
			// the effect is wrong there.
			must := "it must leave the lock alone (a lock of another holder, or of another type, which a command such as MGET reads as absent)"
			if !lock {
				must = "with another key in this state it must do to the lock what it does with every key absent"
			}
			return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("%sthe script %s (%s), where %s", with, e, posName(f.keys[i], a.nkeys), must)}
		}
	}
	if lock && o.o.err == "" && sem.Yes.Match(&o.o.reply, a.nkeys) {
		return &Refusal{Class: ClassBehaviour, Probe: o.name, Reason: fmt.Sprintf("%sthe lock key holds another type and the script answers %s, a yes", with, o.o.reply)}
	}
	return nil
}
