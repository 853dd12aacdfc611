package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Kind is what an operation does to a lock; it decides validity accounting
// and whether a failure is undone.
type Kind uint8

const (
	// Acquire takes a lock: validity is accounted, and a failed attempt is
	// undone on every master where it wrote, with the compensating
	// operation.
	Acquire Kind = iota + 1
	// Release gives a lock up: votes are counted, nothing is undone.
	Release
	// Extend moves a held lock's expiry: validity is accounted for the new
	// TTL, a failure is not undone (the lock keeps its old expiry).
	Extend
	// Read observes a lock without changing it.
	Read
	// AcquireOrExtend takes a free lock or re-sets the TTL of a lock the
	// caller's token holds (one script for both). A failed vote is not
	// undone: where the key was the caller's already, deleting it would take
	// a lock the caller may still believe valid until its old expiry
	// (libraries keep it after a failed extend). Keys it created on a
	// minority expire by their TTL.
	AcquireOrExtend
	// Counter reads or writes a counter (counter.go): nothing is undone.
	Counter
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	case Extend:
		return "extend"
	case Read:
		return "read"
	case AcquireOrExtend:
		return "acquire-or-extend"
	case Counter:
		return "counter"
	}
	return "unknown"
}

// VoteRule says which reply of a master counts as a yes vote: the reply's
// RESP type and, by type, its text, its integer or, for an array, its
// first element. It is a plain description, so that a reply is classified
// without running anything.
type VoteRule struct {
	Type byte // resp.Status, Bulk, Integer, Nil or Array
	// NotNil, instead of Type: any reply but nil and errors.
	NotNil bool
	// Str is the exact text of a Status or Bulk yes; AnyStr accepts any.
	// OrBulk: a Status rule also accepts a Bulk of the same text (a script
	// that returns "OK" for the holder's own lock and SET's +OK for a new
	// one).
	Str    string
	AnyStr bool
	OrBulk bool
	// Cmp and Int decide an Integer yes.
	Cmp IntCmp
	Int int64
	// First decides an Array yes by its first element; an empty array is
	// never a yes.
	First *VoteRule
}

// IntCmp is how a rule compares an integer reply.
type IntCmp uint8

const (
	IntEq          IntCmp = iota + 1 // equal to VoteRule.Int
	IntEqNumKeys                     // equal to the number of keys the command names
	IntPositive                      // > 0
	IntNonNegative                   // >= 0
	IntAny                           // any integer
)

// The rules of lockproxy's own commands and of the catalog's scripts.
var (
	// YesOK: the status reply OK (SET NX, scripts returning status_reply).
	YesOK = VoteRule{Type: resp.Status, Str: "OK"}
	// YesOne: the integer 1 (compare-and-delete, compare-and-pexpire; Lua's
	// true arrives as 1 too).
	YesOne = VoteRule{Type: resp.Integer, Cmp: IntEq, Int: 1}
	// YesPositive: any integer > 0.
	YesPositive = VoteRule{Type: resp.Integer, Cmp: IntPositive}
	// YesNumKeys: the integer equal to the number of keys of the command
	// (multi-key scripts that return how many keys they set or removed).
	YesNumKeys = VoteRule{Type: resp.Integer, Cmp: IntEqNumKeys}
	// YesNonNegative: any integer >= 0 (compare-and-PTTL reads, where
	// negative values mean "not ours" or "missing").
	YesNonNegative = VoteRule{Type: resp.Integer, Cmp: IntNonNegative}
	// YesNotNil: any reply but nil and errors.
	YesNotNil = VoteRule{NotNil: true}
	// YesSameValue: an array whose first element is 1, counted only when
	// a quorum of masters answered the same array (lockproxy's tokenless
	// PEXPIRE: {1, digest of the value extended}; decideVote).
	YesSameValue = VoteRule{Type: resp.Array, First: &YesOne}
	// YesZero: the integer 0 (python-redis-lock's unlock returns 0 when it
	// removed the caller's lock and 1 when the lock was not the caller's).
	YesZero = VoteRule{Type: resp.Integer, Cmp: IntEq, Int: 0}
)

// IsYes applies the rule to one master's reply; nkeys is the number of keys
// the command named.
func (v *VoteRule) IsYes(r *resp.Reply, nkeys int) bool {
	if v.NotNil {
		return r.Type != resp.Nil && r.Type != resp.Error
	}
	if r.Type != v.Type && !(v.OrBulk && r.Type == resp.Bulk) {
		return false
	}
	switch v.Type {
	case resp.Status, resp.Bulk:
		return v.AnyStr || string(r.Str) == v.Str
	case resp.Integer:
		switch v.Cmp {
		case IntEq:
			return r.Int == v.Int
		case IntEqNumKeys:
			return r.Int == int64(nkeys)
		case IntPositive:
			return r.Int > 0
		case IntNonNegative:
			return r.Int >= 0
		case IntAny:
			return true
		}
		return false
	case resp.Array:
		return len(r.Elems) > 0 && v.First != nil && v.First.IsYes(&r.Elems[0], nkeys)
	}
	return v.Type == resp.Nil
}

// LooksLikeYes reports whether a reply the rule does not accept could still
// read as its yes to a client: the same text as a status or a bulk, the
// same integer, or an array whose first element looks like it.
func (v *VoteRule) LooksLikeYes(r *resp.Reply) bool {
	if v.IsYes(r, -1) {
		return true
	}
	switch {
	case v.NotNil:
		return false
	case v.First != nil:
		return r.Type == resp.Array && len(r.Elems) > 0 && v.First.LooksLikeYes(&r.Elems[0])
	case v.Type == resp.Status || v.Type == resp.Bulk:
		return (r.Type == resp.Status || r.Type == resp.Bulk) && (v.AnyStr || string(r.Str) == v.Str)
	}
	return false
}

// Same reports whether two rules accept the same replies.
func (v *VoteRule) Same(o *VoteRule) bool {
	if v.First != nil || o.First != nil {
		if v.First == nil || o.First == nil || !v.First.Same(o.First) {
			return false
		}
	}
	a, b := *v, *o
	a.First, b.First = nil, nil
	return a == b
}

// Combine says which reply the client gets when a quorum voted yes.
type Combine uint8

const (
	// CombineFirst: the yes reply most masters gave, verbatim (the first by
	// master order among equals; all yes replies of a rule like YesOK or
	// YesOne are equal anyway).
	CombineFirst Combine = iota
	// CombineQthTTL: the yes replies are remaining TTLs in milliseconds;
	// the client gets the Q-th largest minus clock drift, the time for which
	// a quorum is known to still hold the key.
	CombineQthTTL
)

// TTLUnit says how to read a TTL argument.
type TTLUnit uint8

const (
	Millis     TTLUnit = iota + 1 // relative milliseconds (PX, PEXPIRE)
	Seconds                       // relative seconds (EX, EXPIRE)
	UnixMillis                    // absolute unix time in milliseconds (PXAT, PEXPIREAT)
	UnixSecs                      // absolute unix time in seconds (EXAT, EXPIREAT)
)

// TTLFrom converts a TTL argument of the given unit into a duration from
// now. now is the wall clock, used only for the absolute units. The result
// may be zero or negative for deadlines in the past.
func TTLFrom(v int64, u TTLUnit, now time.Time) time.Duration {
	switch u {
	case Millis:
		return time.Duration(v) * time.Millisecond
	case Seconds:
		return time.Duration(v) * time.Second
	case UnixMillis:
		return time.UnixMilli(v).Sub(now)
	case UnixSecs:
		return time.Unix(v, 0).Sub(now)
	}
	return 0
}
