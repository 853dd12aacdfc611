package analyze

import (
	"fmt"
	"time"
)

// Kind is what a script does to its lock.
type Kind uint8

const (
	// Acquire takes a free lock; a held lock, the caller's own included,
	// answers no and is left as it was.
	Acquire Kind = iota + 1
	// AcquireOrExtend takes a free lock, and re-sets the TTL of a lock the
	// caller's token already holds (Spring's obtain, go-zero, redsync's
	// touchWithSetNX, bsm/redislock's obtain). The engine chooses whether a
	// failed vote is undone as an acquisition or left as an extension.
	AcquireOrExtend
	// ReentrantAcquire is a hash lock's acquire: a free lock is taken with
	// count 1, the caller's own gets 1 more (Redisson tryLockInner).
	ReentrantAcquire
	// Release deletes the caller's lock.
	Release
	// ReentrantRelease takes 1 from the caller's count of a hash lock and
	// deletes the lock when it reaches 0 (Redisson unlockInner).
	ReentrantRelease
	// Extend re-sets the TTL of the caller's lock and never creates one.
	Extend
	// Read reports on the lock without writing it.
	Read
)

var kindNames = [...]string{Acquire: "acquire", AcquireOrExtend: "acquire-or-extend", ReentrantAcquire: "reentrant-acquire",
	Release: "release", ReentrantRelease: "reentrant-release", Extend: "extend", Read: "read"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Acquires reports whether a failed vote of this kind may leave a lock the
// attempt wrote, which the engine undoes.
func (k Kind) Acquires() bool { return k == Acquire || k == AcquireOrExtend || k == ReentrantAcquire }

// Form is the Redis type of a lock key's value, which decides its undo.
type Form uint8

const (
	FormString Form = iota + 1 // the value is the token
	FormHash                   // a field named by the token holds a re-entry count
	FormZSet                   // a member named by the token, scored with its expiry
	FormAny                    // a release that deletes the key whatever it holds
)

var formNames = [...]string{FormString: "string", FormHash: "hash", FormZSet: "zset", FormAny: "any"}

func (f Form) String() string {
	if int(f) < len(formNames) && formNames[f] != "" {
		return formNames[f]
	}
	return "unknown"
}

// Arg names one argument of EVAL: KEYS[Index] or ARGV[Index], 1-based. The
// zero Arg names nothing.
type Arg struct {
	Keys  bool
	Index int
}

func (a Arg) IsZero() bool { return a.Index == 0 }

func (a Arg) String() string {
	switch {
	case a.Index == 0:
		return "-"
	case a.Keys:
		return fmt.Sprintf("KEYS[%d]", a.Index)
	}
	return fmt.Sprintf("ARGV[%d]", a.Index)
}

// Value is an argument or, when Arg is zero, a constant written in the script.
type Value struct {
	Arg   Arg
	Const string
}

func (v Value) String() string {
	if v.Arg.IsZero() {
		return fmt.Sprintf("%q", v.Const)
	}
	return v.Arg.String()
}

// Unit is how a TTL argument reads.
type Unit uint8

const (
	Millis     Unit = iota + 1 // relative milliseconds (PX, PEXPIRE)
	Seconds                    // relative seconds (EX, EXPIRE)
	UnixMillis                 // absolute unix milliseconds (PXAT, PEXPIREAT)
	UnixSecs                   // absolute unix seconds (EXAT, EXPIREAT)
)

var unitNames = [...]string{Millis: "ms", Seconds: "s", UnixMillis: "unix_ms", UnixSecs: "unix_s"}

func (u Unit) String() string {
	if int(u) < len(unitNames) && unitNames[u] != "" {
		return unitNames[u]
	}
	return "unknown"
}

// TTL is one expiry the script sets and where its length comes from.
type TTL struct {
	Key Arg // the key that gets it; for EachKey locks, each lock key gets its own
	// Arg is the argument the TTL is read from, in Unit; zero when the TTL is
	// the constant Const, written in the script.
	Arg   Arg
	Unit  Unit
	Const time.Duration
	// AddsRemaining: some calls set Arg plus the key's remaining TTL
	// (redis-py's additive extend). Repeated calls grow the key's life
	// without bound, so checking Arg against max_ttl does not bound it.
	AddsRemaining bool
}

func (t TTL) String() string {
	s := t.Key.String() + " expires after "
	if t.Arg.IsZero() {
		return s + t.Const.String()
	}
	s += t.Arg.String() + " " + t.Unit.String()
	if t.AddsRemaining {
		s += " (+ remaining)"
	}
	return s
}
