package proxy

import (
	"strconv"
	"time"

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
