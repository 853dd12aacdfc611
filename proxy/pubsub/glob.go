package pubsub

// Match reports whether s matches the glob pattern exactly as Redis's
// stringmatchlen (util.c, 7.0) decides it for PSUBSCRIBE and KEYS, case
// sensitive and on bytes. A star matches any run of bytes, also none; "?"
// one byte; "[abc]" one byte of the set, "[^abc]" one byte not in it, with
// ranges "a-z" (reversed ranges such as "z-a" accepted) and "\]" for a
// literal; a backslash makes the next byte literal.
//
// Masters match the patterns of the messages they send; Match serves the
// messages the hub makes itself (keyspace notifications) and PUBLISH's
// receiver count, which must agree with what the masters do. So Redis's
// quirks are kept: an unterminated "[" set ends at the pattern's end ("["
// alone matches nothing, "[^" any one byte), a trailing backslash is a
// literal one, and a range compares bytes as C's signed char does on the
// x86-64 builds of Redis ("[a-\xff]" is the range -1..97). glob_test.go
// checks all of this against a real redis-server.
func Match(pattern, s string) bool {
	skip := false
	return match(pattern, s, &skip)
}

// match is stringmatchlen_impl. skip is Redis's skipLongerMatches: once a
// "*" has tried every suffix of s and failed, a "*" further out cannot do
// better, which keeps patterns like "a*a*a*a*b" from taking exponential
// time.
func match(p, s string, skip *bool) bool {
	i, j := 0, 0 // the unmatched rest is p[i:] and s[j:]
	// at reads p like C reads the NUL-terminated sds: the end reads as 0,
	// which is none of the special bytes.
	at := func(k int) byte {
		if k < len(p) {
			return p[k]
		}
		return 0
	}
	for i < len(p) && j < len(s) {
		switch p[i] {
		case '*':
			for i+1 < len(p) && p[i+1] == '*' {
				i++
			}
			if i == len(p)-1 {
				return true
			}
			for j < len(s) {
				if match(p[i+1:], s[j:], skip) {
					return true
				}
				if *skip {
					return false
				}
				j++
			}
			*skip = true
			return false
		case '?':
			j++
		case '[':
			i++
			not := at(i) == '^'
			if not {
				i++
			}
			matched := false
			for {
				if at(i) == '\\' && len(p)-i >= 2 {
					i++
					if p[i] == s[j] {
						matched = true
					}
				} else if at(i) == ']' {
					break
				} else if i >= len(p) {
					i-- // unterminated: the set ends with the pattern
					break
				} else if len(p)-i >= 3 && p[i+1] == '-' {
					lo, hi, c := int8(p[i]), int8(p[i+2]), int8(s[j])
					if lo > hi {
						lo, hi = hi, lo
					}
					if c >= lo && c <= hi {
						matched = true
					}
					i += 2
				} else if p[i] == s[j] {
					matched = true
				}
				i++
			}
			if not {
				matched = !matched
			}
			if !matched {
				return false
			}
			j++
		case '\\':
			if len(p)-i >= 2 {
				i++
			}
			fallthrough
		default:
			if p[i] != s[j] {
				return false
			}
			j++
		}
		i++
		if j == len(s) {
			for i < len(p) && p[i] == '*' {
				i++
			}
			break
		}
	}
	return i == len(p) && j == len(s)
}
