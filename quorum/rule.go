package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/batching"
)

// Kind is what an operation does to a lock; it decides validity accounting
// and whether a failure is undone.
type Kind uint8

const (
	// Acquire takes a lock: validity is accounted, and a failed attempt is
	// undone on every master with the compensating operation.
	Acquire Kind = iota + 1
	// Release gives a lock up: votes are counted, nothing is undone.
	Release
	// Extend moves a held lock's expiry: validity is accounted for the new
	// TTL, a failure is not undone (the lock keeps its old expiry).
	Extend
	// Read observes a lock without changing it.
	Read
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
	}
	return "unknown"
}

// VoteRule says which reply of a master counts as a yes vote.
type VoteRule uint8

const (
	// YesOK: the status reply OK (SET NX, scripts returning status_reply).
	YesOK VoteRule = iota + 1
	// YesOne: the integer 1 (compare-and-delete, compare-and-pexpire).
	YesOne
	// YesPositive: any integer > 0 (DEL counts, PEXPIRE results).
	YesPositive
	// YesNumKeys: the integer equal to the number of keys of the command
	// (multi-key scripts that return how many keys they set or removed).
	YesNumKeys
	// YesNonNegative: any integer >= 0 (compare-and-PTTL reads, where
	// negative values mean "not ours" or "missing").
	YesNonNegative
	// YesNotNil: any reply but nil and errors (scripts returning a value).
	YesNotNil
	// YesTrue: the integer 1 as Lua's true arrives (same as YesOne, kept
	// apart for catalog readability).
	YesTrue
	// YesZero: the integer 0 (python-redis-lock's unlock returns 0 when it
	// removed the caller's lock and 1 when the lock was not the caller's).
	YesZero
)

// IsYes applies the rule to one master's reply; nkeys is the number of keys
// the command named.
func (v VoteRule) IsYes(r *batching.Reply, nkeys int) bool {
	switch v {
	case YesOK:
		return r.IsOK()
	case YesOne, YesTrue:
		return r.IsInt(1)
	case YesPositive:
		return r.Type == batching.Integer && r.Int > 0
	case YesNumKeys:
		return r.IsInt(int64(nkeys))
	case YesNonNegative:
		return r.Type == batching.Integer && r.Int >= 0
	case YesZero:
		return r.IsInt(0)
	case YesNotNil:
		return r.Type != batching.Nil && r.Type != batching.Error
	}
	return false
}

// Combine says which reply the client gets when a quorum voted yes.
type Combine uint8

const (
	// CombineFirst: the first yes reply, verbatim (all yes replies of a
	// rule like YesOK or YesOne are equal anyway).
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
