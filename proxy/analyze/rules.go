package analyze

import (
	"fmt"
	"strconv"
)

// IntCmp is how a yes rule compares an integer reply.
type IntCmp uint8

const (
	IntEq          IntCmp = iota + 1 // equal to YesRule.Int
	IntEqNumKeys                     // equal to the call's number of KEYS
	IntPositive                      // > 0
	IntNonNegative                   // >= 0
	IntAny                           // any integer
)

// YesRule says which master reply is a yes vote: the reply's RESP type and,
// by type, its text, its integer or, for an array, its first element. It is
// a plain description so that the engine classifies replies without Lua.
type YesRule struct {
	Type ReplyType
	// Str is the exact text of a StatusReply or BulkReply yes; AnyStr
	// accepts any text of that type. OrBulk: a StatusReply rule also
	// accepts a BulkReply of the same text (go-zero answers SET's +OK for a
	// new lock and a bulk "OK" from `return "OK"` for the holder's own).
	Str    string
	AnyStr bool
	OrBulk bool
	// Cmp and Int decide an IntReply yes.
	Cmp IntCmp
	Int int64
	// First decides an ArrayReply yes by its first element; an empty array
	// is never a yes.
	First *YesRule
}

// Match applies the rule to one reply of a call that passed numKeys KEYS.
func (y *YesRule) Match(r *Reply, numKeys int) bool {
	if r.Type != y.Type && !(y.OrBulk && r.Type == BulkReply) {
		return false
	}
	switch y.Type {
	case StatusReply, BulkReply:
		return y.AnyStr || r.Str == y.Str
	case IntReply:
		switch y.Cmp {
		case IntEq:
			return r.Int == y.Int
		case IntEqNumKeys:
			return r.Int == int64(numKeys)
		case IntPositive:
			return r.Int > 0
		case IntNonNegative:
			return r.Int >= 0
		case IntAny:
			return true
		}
		return false
	case ArrayReply:
		return len(r.Elems) > 0 && y.First != nil && y.First.Match(&r.Elems[0], numKeys)
	}
	return y.Type == NilReply
}

func (y *YesRule) String() string {
	switch y.Type {
	case NilReply:
		return "nil"
	case StatusReply, BulkReply:
		pre := map[ReplyType]string{StatusReply: "status ", BulkReply: "bulk "}[y.Type]
		if y.OrBulk {
			pre = "status or bulk "
		}
		if y.AnyStr {
			return pre + "(any)"
		}
		return pre + strconv.Quote(y.Str)
	case IntReply:
		switch y.Cmp {
		case IntEq:
			return fmt.Sprintf("integer %d", y.Int)
		case IntEqNumKeys:
			return "integer = #KEYS"
		case IntPositive:
			return "integer > 0"
		case IntNonNegative:
			return "integer >= 0"
		}
		return "integer"
	case ArrayReply:
		return "array whose first element is " + y.First.String()
	}
	return "?"
}

// NoReply is what the client gets when the vote is lost (too few yes votes,
// or no validity left): the script's own not-done reply, never one the yes
// rule accepts.
type NoReply struct {
	Reply Reply
	// PTTLAt says where the script's no reply carries the holder's
	// remaining PTTL in ms (Redisson answers a taken lock with its PTTL):
	// -1 nowhere, 0 the reply itself, i > 0 the array's i-th element. The
	// engine may fill it from the masters that answered no; Reply holds a
	// value to use otherwise.
	PTTLAt int
}

func (n NoReply) String() string {
	s := n.Reply.String()
	if n.PTTLAt >= 0 {
		s += fmt.Sprintf(" (PTTL at %d)", n.PTTLAt)
	}
	return s
}
