package resp

// ParseRedisInt reads b as Redis reads an integer argument (string2ll,
// behind getLongLongFromObject): an optional '-', then decimal digits
// with no leading zero ("0" alone), within int64. strconv.ParseInt also
// takes "+5000", "05000" and "-0", which Redis refuses with "value is not
// an integer or out of range": lockproxy reads a script's TTL and forwards
// the script unchanged, so it must read the TTL as the masters will, or a
// script that takes the key before its PEXPIRE fails there leaves a lock
// without an expiry on every master.
func ParseRedisInt(b []byte) (int64, bool) {
	s := b
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	switch {
	case len(s) == 0, len(b) > 20, s[0] == '+':
		return 0, false
	case s[0] == '0':
		return 0, len(b) == 1 // "0" only: not "-0", not "05"
	}
	return parseInt(b)
}
