package analyze

import (
	"fmt"
	"strings"
)

// Semantics is what a script does, as the quorum engine needs it: to build
// the master command (the script itself, sent unchanged by EVALSHA), account
// validity, classify each master's reply, render the client's reply on a
// lost vote, undo a failed acquisition, bound every TTL and serialize by key.
type Semantics struct {
	Kind Kind // what the script does to its lock
	// Force: an acquire that takes the lock while another token holds it
	// (rueidislock's fcqms), or a release that deletes another token's lock
	// (python-redis-lock's reset, Redisson's forceUnlock). An operator may
	// refuse force acquires.
	Force bool
	Form  Form // the lock keys' Redis type, which decides the undo

	// LockKeys are the arguments that name the lock's keys, as analyzed
	// with MinKeys KEYS. When EachKey is set, every KEYS[i] of a call is a
	// lock key (one lock over all of them, all or nothing), LockKeys being
	// KEYS[1] and any fixed ones.
	LockKeys []Arg
	EachKey  bool
	// MinKeys and MinArgs are the fewest KEYS and ARGV a call must pass: the
	// script reads that many, and was analyzed with them.
	MinKeys, MinArgs int
	// ArgvCountBlind: the script names ARGV only to read ARGV[1] to
	// ARGV[MinArgs], so it cannot tell a call with more ARGV than MinArgs
	// from one with MinArgs (argvCountBlind); the others may act
	// otherwise on another count, and are run with exactly MinArgs.
	// Batches keep their own layout.
	ArgvCountBlind bool

	// Token is the holder's id: a string lock's value, a hash lock's field,
	// a sorted-set lock's member. Tokenless locks (SET k 1 when absent, an
	// unconditional DEL) have a constant Token, or none for a release.
	Token     Value
	Tokenless bool
	// TokenField, for a string lock whose value is a JSON object: the
	// top-level field that holds the token. Its other fields (a constant
	// kind, a host name, a waiter's or the previous holder's token) are
	// no holder's: the masters check the token in this field alone.
	TokenField string
	// Constants are the script's string constants. A call whose token is
	// one of them is refused: the script may write it beside the token
	// (Symfony's "__write__" member, a hash's "mode" field, a JSON
	// value's "kind"), and the masters cannot tell such a token from the
	// constant in every holder's copy, whose lock it then passes for.
	Constants []string

	// TTL is the lock's TTL, for validity accounting: set by every yes of an
	// acquire or extend. Nil for other kinds.
	TTL *TTL
	// OtherTTLs are every other expiry the script may set, on lock keys
	// (a re-entrant release's PEXPIRE) or other keys (a signal list, an
	// idempotency latch), so that the engine can bound all by max_ttl.
	OtherTTLs []TTL

	// ReadsClock: the script calls TIME. Probed under two clocks, it was
	// found to use the time only for expiries and scores relative to now.
	ReadsClock bool

	// DBArg, when set, is an argument the script passes to SELECT; a call
	// must pass "0" there (lockproxy serves database 0 only).
	DBArg Arg
	// CommandArgs are arguments the script uses as a command name; a call
	// must pass one of PublishCommands there (Redisson's
	// redis.call(ARGV[4], KEYS[2], ARGV[1])).
	CommandArgs []Arg

	// Yes classifies a master's reply; No is the client's reply after a
	// lost vote. ReplyIsTTL: a read's yes replies are the lock's remaining
	// TTL in ms (the least over the lock keys), so the client may get the
	// Q-th largest minus drift.
	Yes        YesRule
	No         NoReply
	ReplyIsTTL bool
	// SameReply: a release that answers the same whether it deleted or
	// not; every master's answer counts as a yes and the client hears it.
	SameReply bool
	// AbsentIsYes: a release that answers where no lock is there as it
	// answers a release of the caller's own (Redisson before 3.10.6); a
	// master without the lock votes yes, as one Redis tells the client
	// "unlocked" (build.go, absentAnswersYes).
	AbsentIsYes bool
	// AbsentReply is that reply, with AbsentIsYes.
	AbsentReply Reply
	// DeletedReply, for a release: its yes reply where it deleted the
	// lock, when another yes reply says a count is left (a re-entrant
	// release: Redisson's unlock answers 1 and 0) or the lock was absent
	// (AbsentIsYes). The engine counts the masters that gave it as
	// holding nothing, and lets it reach the client over a count left
	// only when fewer than a quorum may still hold the token (quorum's
	// releaseYes; deletedReply). Nil when one reply says both.
	DeletedReply *Reply

	// Undo takes back what one master's yes to a failed acquisition wrote,
	// per lock key; nil for kinds that do not acquire. NoIsNoop: a master's
	// no reply proves the script wrote no lock key there, so that master
	// needs no undo.
	Undo     *Undo
	NoIsNoop bool

	// Effects issue 14 will act on, reported here only.
	Publishes []Publish
	Pushes    []Push
	Counters  []Counter
	// AuxKeys are the keys other than the lock's that the script reads or
	// writes (signal lists, latches, counters); WrittenKeys, those of them
	// some probe wrote. A call's other keys are left as they were by every
	// path the probes took, which the masters check (quorum.Check.Aux).
	AuxKeys     []Arg
	WrittenKeys []Arg

	// Batch, when set: the script is one such operation per KEYS, each
	// key a lock of its own (batch.go); the fields above describe the
	// call with one key.
	Batch *Batch

	// Probes is how many probe runs the analysis took.
	Probes int
}

// PublishCommands are the command names a script may take from an argument.
var PublishCommands = []string{"publish", "spublish"}

// UndoOp is the compensating operation of a failed acquisition.
type UndoOp uint8

const (
	// UndoDelIfValue deletes the key when its value is the token (or, with
	// JSONField, when the value decoded as JSON has the token in that field).
	UndoDelIfValue UndoOp = iota + 1
	// UndoHashDecr takes 1 from the token's field, deleting the field at 0
	// and the key when it is empty: an acquisition adds 1, its undo takes 1.
	UndoHashDecr
	// UndoZRem removes Members, the members the acquisition added.
	UndoZRem
)

var undoNames = [...]string{UndoDelIfValue: "del-if-value", UndoHashDecr: "hash-decr", UndoZRem: "zrem"}

func (o UndoOp) String() string {
	if int(o) < len(undoNames) && undoNames[o] != "" {
		return undoNames[o]
	}
	return "unknown"
}

// Undo says how to take back exactly what a failed acquisition wrote on one
// lock key, never touching another holder's data. The engine runs its own
// Lua for it, on every lock key.
type Undo struct {
	Op        UndoOp
	Token     Value   // the value, field or member the acquisition wrote
	Members   []Value // UndoZRem: every member the acquisition added, Token first
	JSONField string  // UndoDelIfValue on a JSON value: the field holding the token
}

// Publish is a PUBLISH or SPUBLISH the script makes.
type Publish struct {
	Command    string // "publish" or "spublish"; "" when taken from CommandArg
	CommandArg Arg
	Channel    Value
	Message    Value
	OnYes      bool // made by calls that answer yes
	OnNo       bool // made by calls that answer no
}

// Push is an LPUSH or RPUSH to a list (a signal list waiters block on).
type Push struct {
	Command string
	Key     Arg
	Value   Value
}

// Counter is an INCR-family command on a key (a fencing counter).
type Counter struct {
	Key Arg
	// Returned: the script's yes reply is the counter's new value, or,
	// with At, its At-th element (1-based; Redisson's RFencedLock answers
	// {-1, token}); CounterMoves, CounterAsString, CounterDerived or
	// CounterStored: refused (catalog).
	Returned bool
	At       int
}

// Counter.At values the catalog refuses: lockproxy can hand out the
// quorum's counter value only in one integer place of the reply.
const (
	CounterMoves    = -1 // found in different places in different probes
	CounterAsString = -2 // returned as a string, where one master's would reach the client
)

// String renders the semantics on one line, for logs, INFO and tests.
func (s *Semantics) String() string {
	var b strings.Builder
	b.WriteString(s.Kind.String())
	if s.Force {
		b.WriteString(" force")
	}
	fmt.Fprintf(&b, " %s keys=", s.Form)
	for i, k := range s.LockKeys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k.String())
	}
	if s.EachKey {
		b.WriteString("..")
	}
	switch {
	case s.Tokenless && s.Token.Const == "":
		b.WriteString(" tokenless")
	case s.Tokenless:
		fmt.Fprintf(&b, " tokenless=%s", s.Token)
	default:
		fmt.Fprintf(&b, " token=%s", s.Token)
	}
	switch {
	case s.TTL == nil:
	case s.TTL.Arg.IsZero():
		b.WriteString(" ttl=" + s.TTL.Const.String())
	default:
		b.WriteString(" ttl=" + s.TTL.Arg.String() + " " + s.TTL.Unit.String())
	}
	if s.TTL != nil {
		if s.TTL.AddsRemaining {
			b.WriteString("+remaining")
		}
	}
	fmt.Fprintf(&b, " yes=%s no=%s", s.Yes.String(), s.No)
	if s.ReplyIsTTL {
		b.WriteString(" reply-is-ttl")
	}
	if s.SameReply {
		b.WriteString(" same-reply")
	}
	if s.AbsentIsYes {
		b.WriteString(" absent-is-yes")
	}
	if s.DeletedReply != nil {
		b.WriteString(" deleted=" + s.DeletedReply.String())
	}
	if u := s.Undo; u != nil {
		fmt.Fprintf(&b, " undo=%s(%s", u.Op, u.Token)
		for _, m := range u.Members[min(1, len(u.Members)):] {
			b.WriteString("," + m.String())
		}
		if u.JSONField != "" {
			b.WriteString(" json." + u.JSONField)
		}
		b.WriteString(")")
		if s.NoIsNoop {
			b.WriteString(" no-is-noop")
		}
	}
	if !s.DBArg.IsZero() {
		b.WriteString(" db=" + s.DBArg.String())
	}
	if bt := s.Batch; bt != nil {
		fmt.Fprintf(&b, " batch(shared=%d per-key=%d", bt.Shared, bt.Width)
		if bt.Columns {
			b.WriteString(" columns")
		}
		fmt.Fprintf(&b, " max=%d)", bt.MaxKeys)
	}
	return b.String()
}
