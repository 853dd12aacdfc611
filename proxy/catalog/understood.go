package catalog

import (
	"fmt"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/analyze"
	"github.com/lockproxy/lockproxy/quorum"
)

// fromSemantics turns what the analyzer found a script does into how the
// engine runs it. It refuses what lockproxy cannot run safely even when the
// analyzer could describe it; the error is the reason the client reads.
// maxSemantics bounds the summary of an understood script's behaviour,
// which holds its constant replies and values: with the body (at most
// analyze.Options.MaxBodyBytes) it is what the Understander keeps per
// sha1, for up to 4,096 scripts.
const maxSemantics = 2048

func fromSemantics(body []byte, sha string, sem *analyze.Semantics, maxTTL time.Duration, drift float64) (*Script, error) {
	s := &Script{
		Name: "script " + sha[:12], Body: string(body), SHA1: sha,
		Force: sem.Force, NoIsNoop: sem.NoIsNoop, MinKeys: sem.MinKeys, MinArgs: sem.MinArgs,
		Semantics: sem.String(), ExactArgs: !sem.ArgvCountBlind,
	}
	if !sem.EachKey {
		s.MaxKeys = sem.MinKeys + 1 // analyzed with MinKeys and MinKeys+1 KEYS
		s.AuxGuard = sem.Batch == nil
		for _, k := range sem.WrittenKeys {
			if k.Keys {
				s.WrittenKeys = append(s.WrittenKeys, k.Index)
			}
		}
	}
	if len(s.Semantics) > maxSemantics {
		return nil, fmt.Errorf("what it does takes %d bytes to say, more than %d: it answers or writes long constant values (a reply built with string.rep), which lock scripts do not, and lockproxy keeps what it learns of each script", len(s.Semantics), maxSemantics)
	}
	var err error
	if s.Kind, err = kindOf(sem); err != nil {
		return nil, err
	}
	s.Yes = voteRuleOf(&sem.Yes)
	if sem.AbsentIsYes {
		rep := replyOf(sem.AbsentReply)
		if !quorum.AbsentYesSupported(&rep) {
			return nil, fmt.Errorf("it answers %s both where there is no lock and where it released one; lockproxy can count the masters that gave it only when it is :1, :0, +OK or nil", rep)
		}
		s.AbsentYes = &rep
	}
	if sem.DeletedReply != nil {
		rep := replyOf(*sem.DeletedReply)
		if !quorum.AbsentYesSupported(&rep) {
			// The engine must count the masters that deleted their copy
			// apart from those that still hold a count, or a tie with a
			// holder cut off answers "released" while a quorum holds it.
			return nil, fmt.Errorf("it answers %s where it deleted the lock and another reply where a count is left; lockproxy can count the masters that deleted it only when that reply is :1, :0, +OK or nil", rep)
		}
		s.DeletedYes = &rep
	}
	s.NoReply = replyOf(sem.No.Reply)
	s.NoPTTLAt = sem.No.PTTLAt
	if sem.ReplyIsTTL {
		s.Combine = quorum.CombineQthTTL
	}
	if err := s.layout(sem); err != nil {
		return nil, err
	}
	if err := s.wrap(sem); err != nil {
		return nil, err
	}
	if err := s.ttls(sem, maxTTL); err != nil {
		return nil, err
	}
	if s.TTLConst > 0 && quorum.Validity(s.TTLConst, 0, drift) <= 0 {
		// A write whose TTL is under the drift allowance can hold nothing
		// (Symfony's clock probe: SET k 1 PX 1 after TIME, to learn that
		// scripts may read the clock). Answered by lockproxy, as the
		// masters would, with no round trip and nothing written.
		rep, ok := exactReply(&s.Yes)
		if !ok {
			return nil, fmt.Errorf("it sets a TTL of %v, too short to leave validity after the drift allowance", s.TTLConst)
		}
		s.Local = &rep
	}
	if err := s.undo(sem); err != nil {
		return nil, err
	}
	if err := s.counter(sem); err != nil {
		return nil, err
	}
	for _, p := range sem.Pushes {
		if !p.Key.IsZero() {
			s.Signals = appendArg(s.Signals, quorum.Arg{Keys: p.Key.Keys, Index: p.Key.Index})
		}
	}
	for _, a := range sem.CommandArgs {
		if a.Keys {
			return nil, fmt.Errorf("it runs %s as a command name; lockproxy accepts a command name only in ARGV", a)
		}
		s.CommandArgs = append(s.CommandArgs, a.Index)
	}
	if !sem.DBArg.IsZero() {
		if sem.DBArg.Keys {
			return nil, fmt.Errorf("it SELECTs the database in %s; lockproxy accepts that only in ARGV", sem.DBArg)
		}
		s.DBArg = sem.DBArg.Index
	}
	if sem.Batch != nil {
		if s.Local != nil || s.KeyArg > 0 {
			return nil, fmt.Errorf("it runs one lock operation per KEYS, each of which lockproxy would answer itself or find its key in ARGV; lockproxy splits only operations it sends to the masters with their key in KEYS")
		}
		b := *sem.Batch
		s.Batch = &b
	}
	return s.finish(), nil
}

func kindOf(sem *analyze.Semantics) (quorum.Kind, error) {
	switch sem.Kind {
	case analyze.Acquire, analyze.ReentrantAcquire:
		return quorum.Acquire, nil
	case analyze.AcquireOrExtend:
		return quorum.AcquireOrExtend, nil
	case analyze.Release, analyze.ReentrantRelease:
		return quorum.Release, nil
	case analyze.Extend:
		return quorum.Extend, nil
	case analyze.Read:
		return quorum.Read, nil
	}
	return 0, fmt.Errorf("its kind %s is not one lockproxy runs", sem.Kind)
}

// wrap sets what the masters run instead of the client's body, when the
// engine needs more from each master than the body answers (quorum's
// WrapZeroPTTL and WrapReentrant, in that order).
func (s *Script) wrap(sem *analyze.Semantics) error {
	body, wrapped := s.Body, false
	key := quorum.Arg{Index: s.KeyArg}
	if len(s.LockKeys) == 1 && s.KeyArg == 0 {
		key = quorum.Arg{Keys: true, Index: s.LockKeys[0]}
	}
	if s.NoPTTLAt >= 0 {
		zero := s.NoReply
		switch {
		case s.NoPTTLAt == 0:
			zero.Int = 0
		case s.NoPTTLAt <= len(zero.Elems):
			zero.Elems = append([]resp.Reply(nil), zero.Elems...)
			zero.Elems[s.NoPTTLAt-1].Int = 0
		}
		if s.Yes.IsYes(&zero, max(s.MinKeys, 1)) {
			if s.NoPTTLAt != 0 || key.Index == 0 {
				return fmt.Errorf("a holder's PTTL of 0 in its no reply would read as a yes, and lockproxy can correct that only for one lock key and a reply that is the PTTL itself")
			}
			var err error
			if body, err = quorum.WrapZeroPTTL(body, key); err != nil {
				return fmt.Errorf("it is %s", err)
			}
			wrapped = true
		}
	}
	// A hash lock's renewal is checked like a re-entry: it gives the
	// holder validity, so the masters it renews must hold the holder's
	// depth; a quorum of low counts renewed while a master that held the
	// depth expired let one release delete the lock (found by review).
	if sem.Kind == analyze.ReentrantAcquire || (sem.Kind == analyze.Extend && sem.Form == analyze.FormHash) {
		if !key.Keys || s.TokenArg == 0 {
			return fmt.Errorf("it is a re-entrant lock whose key is not one of KEYS or whose token is not an argument: lockproxy reads each master's count of the token to decide it")
		}
		var err error
		if body, err = quorum.WrapReentrant(body, key, quorum.Arg{Keys: s.TokenInKeys, Index: s.TokenArg}); err != nil {
			return fmt.Errorf("it is %s", err)
		}
		s.Reentrant, wrapped = true, true
	}
	if s.AbsentYes != nil {
		keys := make([]quorum.Arg, 0, len(s.LockKeys)+1)
		for _, k := range s.LockKeys {
			keys = append(keys, quorum.Arg{Keys: true, Index: k})
		}
		if s.KeyArg > 0 {
			keys = append(keys, quorum.Arg{Index: s.KeyArg})
		}
		var err error
		if body, err = quorum.WrapAbsentYes(body, keys, sem.EachKey, *s.AbsentYes); err != nil {
			return fmt.Errorf("it is %s", err)
		}
		wrapped = true
	}
	if wrapped {
		s.masterBody, s.masterSHA = body, quorum.ScriptSHA1(body)
	}
	return nil
}

// layout says where the lock's keys and its token are.
func (s *Script) layout(sem *analyze.Semantics) error {
	for _, k := range sem.LockKeys {
		if !k.Keys {
			if s.KeyArg != 0 {
				return fmt.Errorf("it takes two lock keys from ARGV (%s and ARGV[%d])", k, s.KeyArg)
			}
			s.KeyArg = k.Index
			continue
		}
		s.LockKeys = append(s.LockKeys, k.Index)
	}
	if sem.EachKey {
		s.LockKeys = nil // every KEYS: the catalog's convention
	}
	if sem.Token.Arg.IsZero() {
		s.TokenConst = sem.Token.Const
	} else {
		s.TokenArg, s.TokenInKeys = sem.Token.Arg.Index, sem.Token.Arg.Keys
		s.TokenNot = sem.Constants
		if sem.TokenField != "" {
			// A JSON lock value: the token counts in its field only. Any
			// top-level field let a client whose token was a constant
			// field's value ("kind": "mutex") pass for every holder, and
			// its force band was granted their lock (hunt, helper-92).
			tok := fmt.Sprintf("ARGV[%d]", s.TokenArg)
			if s.TokenInKeys {
				tok = fmt.Sprintf("KEYS[%d]", s.TokenArg)
			}
			s.CheckToken = fmt.Sprintf("{f = %s, v = %s}", luaString(sem.TokenField), tok)
		}
	}
	return nil
}

// ttls reads where the lock's TTL and every other TTL come from.
func (s *Script) ttls(sem *analyze.Semantics, maxTTL time.Duration) error {
	if t := sem.TTL; t != nil {
		if t.AddsRemaining {
			return fmt.Errorf("it sets %s plus the key's remaining TTL: repeated, that keeps a key past max_ttl, which lockproxy cannot bound", t.Arg)
		}
		if t.Arg.IsZero() {
			if t.Const > maxTTL {
				return fmt.Errorf("it sets a TTL of %v, over max_ttl %v", t.Const, maxTTL)
			}
			s.TTLConst = t.Const
		} else {
			s.TTLArg, s.TTLInKeys, s.TTLUnit = t.Arg.Index, t.Arg.Keys, unitOf(t.Unit)
		}
	}
	for _, t := range sem.OtherTTLs {
		if t.AddsRemaining {
			return fmt.Errorf("it sets %s plus the key's remaining TTL on %s: repeated, that keeps a key past max_ttl, which lockproxy cannot bound", t.Arg, t.Key)
		}
		if t.Arg.IsZero() {
			if t.Const > maxTTL {
				return fmt.Errorf("it sets a TTL of %v on %s, over max_ttl %v", t.Const, t.Key, maxTTL)
			}
			continue
		}
		s.OtherTTLs = append(s.OtherTTLs, ArgTTL{Arg: t.Arg.Index, Keys: t.Arg.Keys, Unit: unitOf(t.Unit)})
	}
	return nil
}

// undo says how a failed acquisition is taken back.
func (s *Script) undo(sem *analyze.Semantics) error {
	u := sem.Undo
	if s.Kind != quorum.Acquire {
		return nil
	}
	if u == nil {
		return fmt.Errorf("it acquires, but no undo was found for a failed vote")
	}
	if !u.Token.Arg.IsZero() && (u.Token.Arg != sem.Token.Arg) {
		return fmt.Errorf("its undo's token %s is not the lock's token %s", u.Token, sem.Token)
	}
	switch u.Op {
	case analyze.UndoDelIfValue:
		s.Undo = quorum.UndoDelIfValue
		if u.JSONField != "" {
			s.Undo, s.UndoField = quorum.UndoJSONField, u.JSONField
		}
	case analyze.UndoHashDecr:
		s.Undo = quorum.UndoHashDecr
	case analyze.UndoZRem:
		s.Undo = quorum.UndoZRem
		for _, m := range u.Members[1:] {
			if !m.Arg.IsZero() {
				return fmt.Errorf("its acquisition adds the member %s besides the token; lockproxy undoes only constant extra members", m)
			}
			s.UndoExtra = append(s.UndoExtra, m.Const)
		}
	default:
		return fmt.Errorf("its undo %s is not one lockproxy runs", u.Op)
	}
	return nil
}

// counter wires a fencing counter the script returns: its grant answers
// the quorum max-register's value of it (quorum.ScriptOp.Counter). A
// counter a script increments without returning it needs nothing: its
// masters' values only grow, and INCR or GET through lockproxy read their
// maximum.
func (s *Script) counter(sem *analyze.Semantics) error {
	returned := 0
	for _, c := range sem.Counters {
		if c.Returned {
			returned++
		}
	}
	if returned > 1 {
		return fmt.Errorf("it returns the new values of %d counters; lockproxy hands out one fencing token per grant, where it can put the quorum's", returned)
	}
	for _, c := range sem.Counters {
		if !c.Returned {
			continue
		}
		switch c.At {
		case analyze.CounterAsString:
			return fmt.Errorf("it returns the new value of the counter %s as a string; lockproxy hands out a fencing token only as an integer, where it can put the quorum's value (one master's would reach the client)", c.Key)
		case analyze.CounterMoves:
			return fmt.Errorf("it returns the new value of the counter %s in different places of its reply; lockproxy hands out a fencing token only where it can put the quorum's", c.Key)
		case analyze.CounterDerived:
			return fmt.Errorf("its reply carries the counter %s's value, or a value made from it, outside the one integer place where lockproxy can put the quorum's (one master's would reach the client)", c.Key)
		case analyze.CounterDown:
			return fmt.Errorf("it hands out the counter %s after lowering it (DECR, a negative INCRBY): fencing tokens must grow from grant to grant", c.Key)
		case analyze.CounterStored:
			return fmt.Errorf("it passes the counter %s's value to another command (it stores it, in the lock or elsewhere, or compares it): each master would keep its own value, which lockproxy cannot make the quorum's", c.Key)
		}
		if s.Kind != quorum.Acquire && s.Kind != quorum.AcquireOrExtend {
			return fmt.Errorf("it returns the new value of the counter %s from a %s script; lockproxy hands out counter values (fencing tokens) from acquire scripts and INCR only, where it can keep them from going back", c.Key, s.Kind)
		}
		s.Counter = quorum.Arg{Keys: c.Key.Keys, Index: c.Key.Index}
		s.CounterAt = c.At
		return nil
	}
	return nil
}

func voteRuleOf(y *analyze.YesRule) quorum.VoteRule {
	v := quorum.VoteRule{Str: y.Str, AnyStr: y.AnyStr, OrBulk: y.OrBulk, Int: y.Int}
	v.Type = replyTypeOf(y.Type)
	switch y.Cmp {
	case analyze.IntEq:
		v.Cmp = quorum.IntEq
	case analyze.IntEqNumKeys:
		v.Cmp = quorum.IntEqNumKeys
	case analyze.IntPositive:
		v.Cmp = quorum.IntPositive
	case analyze.IntNonNegative:
		v.Cmp = quorum.IntNonNegative
	case analyze.IntAny:
		v.Cmp = quorum.IntAny
	}
	if y.First != nil {
		f := voteRuleOf(y.First)
		v.First = &f
	}
	return v
}

func replyTypeOf(t analyze.ReplyType) byte {
	switch t {
	case analyze.StatusReply:
		return resp.Status
	case analyze.ErrorReply:
		return resp.Error
	case analyze.IntReply:
		return resp.Integer
	case analyze.BulkReply:
		return resp.Bulk
	case analyze.ArrayReply:
		return resp.Array
	}
	return resp.Nil
}

func replyOf(r analyze.Reply) resp.Reply {
	out := resp.Reply{Type: replyTypeOf(r.Type), Int: r.Int}
	if r.Type == analyze.StatusReply || r.Type == analyze.ErrorReply || r.Type == analyze.BulkReply {
		out.Str = []byte(r.Str)
	}
	for _, e := range r.Elems {
		out.Elems = append(out.Elems, replyOf(e))
	}
	return out
}

func unitOf(u analyze.Unit) quorum.TTLUnit {
	switch u {
	case analyze.Seconds:
		return quorum.Seconds
	case analyze.UnixMillis:
		return quorum.UnixMillis
	case analyze.UnixSecs:
		return quorum.UnixSecs
	}
	return quorum.Millis
}

// exactReply is the one reply rule y accepts, when there is one.
func exactReply(y *quorum.VoteRule) (resp.Reply, bool) {
	switch {
	case y.NotNil || y.First != nil || y.AnyStr:
		return resp.Reply{}, false
	case y.Type == resp.Integer && y.Cmp == quorum.IntEq:
		return resp.Reply{Type: resp.Integer, Int: y.Int}, true
	case y.Type == resp.Status || y.Type == resp.Bulk:
		return resp.Reply{Type: y.Type, Str: []byte(y.Str)}, true
	case y.Type == resp.Nil:
		return resp.ReplyNil, true
	}
	return resp.Reply{}, false
}

// appendArg appends a to args unless it is there.
func appendArg(args []quorum.Arg, a quorum.Arg) []quorum.Arg {
	for _, b := range args {
		if b == a {
			return args
		}
	}
	return append(args, a)
}
