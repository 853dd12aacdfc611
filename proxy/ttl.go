package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// The TTLs clients ask for: converted, and bounded by max_ttl.

// ttlOf converts a client's TTL to a duration, bounded by max_ttl. The
// message is a client error when it is out of range.
func (s *Server) ttlOf(v int64, unit quorum.TTLUnit) (time.Duration, string) {
	maxTTL := s.maxTTL
	// Bound before converting, so huge values cannot overflow.
	limit, rel := int64(0), true
	switch unit {
	case quorum.Millis:
		limit = maxTTL.Milliseconds()
	case quorum.Seconds:
		limit = int64(maxTTL / time.Second)
	default:
		rel = false
	}
	if rel && v > limit {
		return 0, "ERR TTL " + strconv.FormatInt(v, 10) + unitName(unit) + " exceeds max_ttl " + maxTTL.String() + " (quorum.max_ttl in config.toml)"
	}
	if !rel && v > 1<<53 {
		return 0, "ERR invalid expire time"
	}
	var now time.Time
	if !rel {
		now = time.Now() // absolute units only: the wall clock costs a call
	}
	ttl := quorum.TTLFrom(v, unit, now)
	if ttl > maxTTL {
		return 0, "ERR TTL " + ttl.Round(time.Millisecond).String() + " exceeds max_ttl " + maxTTL.String() + " (quorum.max_ttl in config.toml)"
	}
	return ttl, ""
}

func unitName(u quorum.TTLUnit) string {
	if u == quorum.Seconds {
		return "s"
	}
	return "ms"
}

// accountedTTL is ttlOf for a TTL whose validity lockproxy accounts: SET,
// PEXPIRE/EXPIRE, and the TTL of acquire and extend scripts. It is also
// refused when the drift allowance leaves it no validity: such a lock
// could never be granted, and a client retrying on "held" would spin
// forever on a free lock.
func (s *Server) accountedTTL(v int64, unit quorum.TTLUnit) (time.Duration, string) {
	ttl, msg := s.ttlOf(v, unit)
	if msg != "" {
		return 0, msg
	}
	if quorum.Validity(ttl, 0, s.drift) > 0 {
		return ttl, ""
	}
	given := strconv.FormatInt(v, 10) + unitName(unit)
	if unit == quorum.UnixMillis || unit == quorum.UnixSecs {
		given = ttl.Round(time.Millisecond).String() + " (an absolute expiry " + map[bool]string{true: "in the past", false: "too near"}[ttl <= 0] + ")"
	}
	return 0, "ERR TTL " + given + " is too short: the clock drift allowance (2ms + TTL × quorum.clock_drift_factor " +
		strconv.FormatFloat(s.drift, 'g', -1, 64) + ") leaves it no validity, so the lock could never be granted; the minimum is " + s.minTTL.String()
}

// minTTLFor is the shortest whole-millisecond TTL that leaves validity once
// the drift allowance is taken off: ttl - drift(ttl) > 0 (3ms at the
// default factor 0.01).
func minTTLFor(factor float64) time.Duration {
	m := time.Millisecond
	for quorum.Validity(m, 0, factor) <= 0 {
		m += time.Millisecond
	}
	return m
}

// scriptTTLs checks every TTL an EVAL of sc carries: the lock's (TTLArg,
// accounted: returned for validity; 0 when none) and the others
// (OtherTTLs). msg is the client's error, or "".
func (s *Server) scriptTTLs(sc *catalog.Script, keys, argv [][]byte) (ttl time.Duration, msg string) {
	switch {
	case sc.Kind == quorum.Read:
	case sc.TTLConst > 0:
		ttl = sc.TTLConst
	case sc.TTLArg > 0:
		where, from := argName(sc.TTLInKeys, sc.TTLArg), argv
		if sc.TTLInKeys {
			from = keys
		}
		if sc.TTLArg > len(from) {
			return 0, fmt.Sprintf("ERR script %q expects its TTL in %s, but only %d %s were given", sc.Name, where, len(from), where[:4])
		}
		v, ok := resp.ParseRedisInt(from[sc.TTLArg-1])
		if !ok {
			return 0, fmt.Sprintf("ERR script %q: %s should be its TTL, %s", sc.Name, where, redisInteger)
		}
		if v <= 0 && (sc.TTLUnit == quorum.Millis || sc.TTLUnit == quorum.Seconds) {
			// Many lock scripts take 0 to mean "no expiry" (Medusa's
			// acquire without expire): say that, not "too short".
			return 0, fmt.Sprintf("ERR script %q: %s is %d, and lockproxy takes a lock only with a TTL: a lock that never expires is lost for good with its holder; pass a TTL in %s",
				sc.Name, where, v, unitName(sc.TTLUnit))
		}
		if ttl, msg = s.accountedTTL(v, sc.TTLUnit); msg != "" {
			return 0, fmt.Sprintf("ERR script %q: %s: %s", sc.Name, where, strings.TrimPrefix(msg, "ERR "))
		}
	}
	return ttl, s.checkOtherTTLs(sc, keys, argv)
}

// redisInteger is how a script's TTL must be written: as Redis reads an
// integer argument (resp.ParseRedisInt). The script goes to the masters
// unchanged, so a TTL lockproxy read otherwise than they do could fail
// there halfway through, after the key was taken.
const redisInteger = "an integer as Redis reads one (decimal digits, no '+', no leading zero)"

func argName(inKeys bool, i int) string {
	if inKeys {
		return "KEYS[" + strconv.Itoa(i) + "]"
	}
	return "ARGV[" + strconv.Itoa(i) + "]"
}

// checkOtherTTLs checks the TTLs a script carries besides its lock's
// (Script.OtherTTLs): each must be a positive integer within max_ttl, as
// SET's is. It returns the client's error, or "".
func (s *Server) checkOtherTTLs(sc *catalog.Script, keys, argv [][]byte) string {
	for _, o := range sc.OtherTTLs {
		if o.Arg == 0 {
			continue // a constant, checked when the script was understood
		}
		where, from := argName(o.Keys, o.Arg), argv
		if o.Keys {
			from = keys
		}
		if o.Arg > len(from) {
			return fmt.Sprintf("ERR script %q expects a TTL in %s, but only %d %s were given", sc.Name, where, len(from), where[:4])
		}
		v, ok := resp.ParseRedisInt(from[o.Arg-1])
		if !ok {
			return fmt.Sprintf("ERR script %q: %s should be a TTL in %s, %s", sc.Name, where, unitName(o.Unit), redisInteger)
		}
		if v <= 0 {
			return fmt.Sprintf("ERR script %q: %s: invalid expire time %d: a TTL must be positive", sc.Name, where, v)
		}
		if _, msg := s.ttlOf(v, o.Unit); msg != "" {
			return fmt.Sprintf("ERR script %q: %s: %s", sc.Name, where, strings.TrimPrefix(msg, "ERR "))
		}
	}
	return ""
}
