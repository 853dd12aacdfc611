package quorum

import (
	"fmt"
	"strings"
	"time"
)

// MaxMasters is the largest number of masters lockproxy votes over.
const MaxMasters = 9

// Size returns the quorum for n masters: a strict majority.
func Size(n int) int { return n/2 + 1 }

// Drift is the clock drift allowance for a TTL: ttl*factor plus 2ms for the
// granularity of Redis's expiry clock, as in the Redlock description.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// Validity is the time a lock acquired with ttl is known to be held after
// elapsed has passed since the request was parsed: ttl - elapsed - drift.
// Not positive means the lock must be considered not acquired.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}

// NoQuorumError is the reply when fewer than a quorum of masters answered:
// the lock state is unknown, which a client must never take for "held by
// someone else".
type NoQuorumError struct {
	Answered, N, Q int
	Why            []string // per unavailable master: "addr: reason"
}

func (e *NoQuorumError) Error() string {
	s := fmt.Sprintf("NOQUORUM %d of %d masters answered, %d needed", e.Answered, e.N, e.Q)
	if len(e.Why) > 0 {
		s += " (" + strings.Join(e.Why, "; ") + ")"
	}
	return s
}
