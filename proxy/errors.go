package proxy

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// RESP error prefixes that are part of the contract: one place defines them.
const (
	errPrefixNoQuorum = "NOQUORUM"
	errPrefixNoScript = "NOSCRIPT"
	errPrefixNoAuth   = "NOAUTH"
	errPrefixWrongPwd = "WRONGPASS"
)

// The client's text of an outcome the engine reports as an error: NOQUORUM
// with each missing master and why, written here and only here.

// errorText is the error reply (without its '-') for an operation's error.
func errorText(err error) string {
	var nq *quorum.NoQuorumError
	if errors.As(err, &nq) {
		return noQuorumText(nq)
	}
	var ce *quorum.CounterError
	if errors.As(err, &ce) {
		return counterText(ce)
	}
	return err.Error()
}

// counterText is a refused counter operation's reply: Redis's own where
// Redis would refuse it too.
func counterText(e *quorum.CounterError) string {
	switch e.Why {
	case quorum.Overflow:
		return "ERR increment or decrement would overflow"
	case quorum.HasExpiry:
		return "ERR the key has an expiry, so it is a lock or a value lockproxy did not write: lockproxy counts only on keys without one, as a counter that expires starts over"
	}
	return "ERR value is not an integer or out of range"
}

// noQuorumText is "NOQUORUM k of n masters answered, q needed (master a:
// why; …)": the lock state is unknown, and the operator can see which
// masters are missing and what to do.
func noQuorumText(e *quorum.NoQuorumError) string {
	var b strings.Builder
	b.WriteString(errPrefixNoQuorum + " ")
	b.WriteString(strconv.Itoa(e.Answered) + " of " + strconv.Itoa(e.N) + " masters answered, " + strconv.Itoa(e.Q) + " needed")
	writeMisses(&b, e)
	return b.String()
}

// writeMisses appends " (master a: why; …)" for each master whose reply
// did not count, nothing when there is none.
func writeMisses(b *strings.Builder, e *quorum.NoQuorumError) {
	for i, m := range e.Masters {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		b.WriteString("master " + m.Addr + ": " + missText(m.Err))
	}
	if len(e.Masters) > 0 {
		b.WriteString(")")
	}
}

// missText says why one master's vote did not count.
func missText(err error) string {
	var q *quorum.QuarantineError
	var ev *quorum.EvictionError
	var st *quorum.StaleError
	switch {
	case errors.As(err, &q):
		return quarantineText(q)
	case errors.As(err, &ev):
		if ev.Policy == "noeviction" {
			return "it may have evicted lock keys (its maxmemory-policy was not noeviction) and lockproxy has not yet recorded its quarantine in its marker; its votes do not count until it has"
		}
		return "maxmemory-policy is " + ev.Policy + ", which may evict lock keys, so its votes do not count: set maxmemory-policy noeviction on it"
	case errors.As(err, &st):
		s := "lockproxy could not check it (eviction policy, marker, max_ttl record) for longer than the record grace, so its votes do not count until a check answers"
		if st.LastErr != "" {
			s += "; last check: " + st.LastErr
		}
		return s
	case errors.Is(err, quorum.ErrRepairPending):
		return "its counters are not restored yet since it lost its data, so it does not vote on counters (it does on locks once its quarantine ends; INFO quorum shows counters=pending)"
	case errors.Is(err, quorum.ErrNodeTimeout):
		return "no reply within node_timeout"
	case errors.Is(err, quorum.ErrValidityTimeout):
		return "no reply before the lock's validity ran out (its TTL minus the clock drift allowance, shorter than node_timeout): give it a longer TTL"
	case errors.Is(err, quorum.ErrQueueFull):
		return "queue full (the master is too slow to keep up; queue_limit)"
	}
	return err.Error()
}

func quarantineText(q *quorum.QuarantineError) string {
	until := q.Until.UTC().Format(time.RFC3339Nano)
	switch q.Why {
	case quorum.WhyUnverified:
		return "not checked yet: lockproxy has just connected to it and is reading its lockproxy marker; it votes once that answers"
	case quorum.WhyBootstrap:
		return "waiting for the bootstrap decision: lockproxy is asking every master whether this is a new deployment (bootstrap = true); it votes once all have answered, or is quarantined"
	case quorum.WhyEvicting:
		return "quarantined until " + until + " (it may have evicted lock keys: maxmemory-policy was not noeviction; its votes count again once the longest lock it may have lost has expired)"
	}
	return "quarantined until " + until + " (restarted without its data; its votes count again once the longest lock it may have lost has expired)"
}

// patternRefusal is the client's text for a PSUBSCRIBE the hub refused
// for the bounds on patterns (every PUBLISH is matched against each, on
// the event loop), or "" for another error.
func patternRefusal(err error, pattern []byte) string {
	switch {
	case errors.Is(err, pubsub.ErrPatternTooLong):
		return "ERR pattern of " + strconv.Itoa(len(pattern)) + " bytes is longer than lockproxy's limit of " +
			strconv.Itoa(pubsub.MaxPatternLen) + " bytes for patterns (every PUBLISH is matched against each); use a shorter pattern"
	case errors.Is(err, pubsub.ErrSubscriberPatternLimit):
		return "ERR too many patterns on this connection (pubsub.max_patterns_per_connection in config.toml); punsubscribe some"
	case errors.Is(err, pubsub.ErrTooManyPatterns):
		return "ERR too many distinct patterns on this lockproxy (pubsub.max_patterns in config.toml: every PUBLISH is matched against each); retry later or raise the limit"
	}
	return ""
}
