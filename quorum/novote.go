package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/batching"
)

// Masters whose votes do not count: quarantined (for a while, with a
// reason) or barred (while a condition lasts). The request path reads one
// atomic of each per reply and builds an error only when one is set.

// Why says why a master is quarantined.
type Why uint32

const (
	// WhyUnverified: (re)connected, its marker not read yet.
	WhyUnverified Why = iota + 1
	// WhyBootstrap: at start, waiting for every master to say whether the
	// deployment is new (bootstrap = true).
	WhyBootstrap
	// WhyRestarted: it lost its data (its marker was missing, now or
	// earlier).
	WhyRestarted
	// WhyEvicting: it was seen with a maxmemory-policy that may evict keys.
	WhyEvicting
)

// Bar flags: conditions that stop a master's votes while they last.
const (
	barEvicting uint32 = 1 << iota // maxmemory-policy is not noeviction
	barStale                       // this proxy's max_ttl record on it is older than the grace
	// barEnding: it is in a restart or eviction quarantine, which ends
	// when a check says its marker is "ok", not when the clock passes
	// the end: in between, the lift may be waiting for other masters to
	// answer (liftable), and the check after the end takes a round trip.
	barEnding
)

// MasterStatus is one master's state, for INFO and metrics.
type MasterStatus struct {
	Addr     string
	Up       bool
	Err      error // why it is down
	Queued   int
	Inflight int
	// Server is the version its last connection reported (zero: none
	// read yet); one lockproxy refused stays here, with Err saying so.
	Server           batching.ServerVersion
	QuarantinedUntil time.Time // zero: not quarantined
	QuarantineWhy    Why       // set with QuarantinedUntil
	// Excluded, when not empty, says why its votes do not count although
	// it is not quarantined (a maxmemory-policy that may evict keys; a
	// marker check overdue).
	Excluded string
	// CountersPending: it lost its data and its counters are not restored
	// yet (repair.go), so it does not vote on counters, whatever Voting says.
	CountersPending bool
}

// Voting reports whether the master's votes count now.
func (m MasterStatus) Voting() bool {
	return m.Up && m.QuarantinedUntil.IsZero() && m.Excluded == ""
}

// setQuarantine makes master i's votes not count until until, for why
// (zero time: count again).
func (e *Engine) setQuarantine(i int, until time.Time, why Why) {
	if until.IsZero() {
		e.quarantine[i].Store(0)
		return
	}
	e.qwhy[i].Store(uint32(why))
	e.quarantine[i].Store(until.UnixMilli())
}

// SetQuarantine quarantines master i until until (zero: lift it), as a
// restarted master. For tests and tools; the monitor decides otherwise.
func (e *Engine) SetQuarantine(i int, until time.Time) { e.setQuarantine(i, until, WhyRestarted) }

// QuarantinedUntil reports whether master i is quarantined now, and until
// when.
func (e *Engine) QuarantinedUntil(i int) (time.Time, bool) {
	ms := e.quarantine[i].Load()
	if ms == 0 {
		return time.Time{}, false
	}
	until := time.UnixMilli(ms)
	if time.Now().After(until) {
		e.quarantine[i].CompareAndSwap(ms, 0)
		return time.Time{}, false
	}
	return until, true
}

func (e *Engine) quarantineWhy(i int) (Why, bool) {
	_, q := e.QuarantinedUntil(i)
	return Why(e.qwhy[i].Load()), q
}

func (e *Engine) bar(i int, flag uint32)   { e.barred[i].Or(flag) }
func (e *Engine) unbar(i int, flag uint32) { e.barred[i].And(^flag) }

// noVote returns why master i's reply is no vote now, or nil: a policy
// that may evict first (the operator can act on it), then a quarantine,
// then checks that have failed for too long.
func (e *Engine) noVote(i int) error {
	err := e.barredErr(i)
	if _, evicting := err.(*EvictionError); evicting {
		return err
	}
	if e.quarantine[i].Load() != 0 {
		if until, q := e.QuarantinedUntil(i); q {
			return &QuarantineError{Until: until, Why: Why(e.qwhy[i].Load())}
		}
	}
	return err
}

func (e *Engine) barredErr(i int) error { return e.barredErrOf(i, e.barred[i].Load()) }

// barredErrOf is barredErr for the bars b.
func (e *Engine) barredErrOf(i int, b uint32) error {
	switch {
	case b == 0:
		return nil
	case b&barEvicting != 0:
		policy := "not noeviction"
		if p := e.policies[i].Load(); p != nil {
			policy = *p
		}
		return &EvictionError{Policy: policy}
	case b&barEnding != 0:
		return &QuarantineError{Why: Why(e.qwhy[i].Load())} // no end: it ends on a check
	default:
		se := &StaleError{}
		if p := e.checkErrs[i].Load(); p != nil {
			se.LastErr = *p
		}
		return se
	}
}

// setCheckErr keeps the last failed check's error of master i, for the
// stale bar's message.
func (e *Engine) setCheckErr(i int, msg string) { e.checkErrs[i].Store(&msg) }

// QuarantineError is a master's vote that does not count for a while.
type QuarantineError struct {
	Until time.Time
	Why   Why
}

func (e *QuarantineError) Error() string {
	if e.Until.IsZero() {
		if e.Why == WhyUnverified || e.Why == WhyBootstrap {
			return "not checked yet since it (re)connected: it votes once a check of its lockproxy marker says ok (if checks fail, see the log for the master's check error)"
		}
		return "its quarantine (restarted without its data, or evicting) has run out and a check is ending it: its marker must say ok and enough other masters (N-Q+1) must have answered a check since it stopped voting, so that the longest max_ttl of any lockproxy is known; it votes once one does"
	}
	until := e.Until.UTC().Format(time.RFC3339Nano)
	switch e.Why {
	case WhyUnverified:
		return "not checked yet: lockproxy has just connected to it and is reading its lockproxy marker; it votes once that answers"
	case WhyBootstrap:
		return "waiting for the bootstrap decision: lockproxy is asking every master whether this is a new deployment (bootstrap = true); it votes once all have answered, or is quarantined"
	case WhyEvicting:
		return "quarantined until " + until + " (it may have evicted lock keys: maxmemory-policy was not noeviction; its votes count again once the longest lock it may have lost has expired)"
	}
	return "quarantined until " + until + " (restarted without its data; its votes count again once the longest lock it may have lost has expired)"
}

// EvictionError: the master's maxmemory-policy may evict lock keys, or did
// and its quarantine is not recorded in its marker yet.
type EvictionError struct{ Policy string }

func (e *EvictionError) Error() string {
	if e.Policy == "noeviction" {
		return "it may have evicted lock keys (its maxmemory-policy was not noeviction) and lockproxy has not yet recorded its quarantine in its marker; its votes do not count until it has"
	}
	return "maxmemory-policy is " + e.Policy + ", which may evict lock keys, so its votes do not count: set maxmemory-policy noeviction on it"
}

// StaleError: no check of the master succeeded for longer than the grace,
// so its eviction policy (and this proxy's max_ttl record on it) are
// unknown.
type StaleError struct{ LastErr string }

func (e *StaleError) Error() string {
	s := "lockproxy could not check it (eviction policy, marker, max_ttl record) for longer than the record grace, so its votes do not count until a check answers"
	if e.LastErr != "" {
		s += "; last check: " + e.LastErr
	}
	return s
}
