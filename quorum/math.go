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

// NoQuorumError is the outcome when fewer than a quorum of masters
// answered: the lock state is unknown, which a client must never take for
// "held by someone else". The proxy writes the client's text from it.
type NoQuorumError struct {
	Answered, N, Q int
	Masters        []MasterFailure // the masters whose vote did not count, and why
}

// MasterFailure is one master's missing vote: Err is a *QuarantineError,
// *EvictionError, *StaleError, ErrNodeTimeout, a *batching.MasterError
// (down, queue full…), or the master's own error reply (LOADING, BUSY…).
type MasterFailure struct {
	Addr string
	Err  error
}

// Error is a plain rendering, for logs and tests.
func (e *NoQuorumError) Error() string {
	s := fmt.Sprintf("NOQUORUM %d of %d masters answered, %d needed", e.Answered, e.N, e.Q)
	if len(e.Masters) > 0 {
		why := make([]string, len(e.Masters))
		for i, m := range e.Masters {
			why[i] = "master " + m.Addr + ": " + m.Err.Error()
		}
		s += " (" + strings.Join(why, "; ") + ")"
	}
	return s
}
