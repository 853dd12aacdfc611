package pubsub

// Match reports whether s matches the glob pattern exactly as Redis's
// stringmatchlen (util.c, 7.0) decides it for PSUBSCRIBE and KEYS, case
// sensitive and on bytes. A star matches any run of bytes, also none; "?"
// one byte; "[abc]" one byte of the set, "[^abc]" one byte not in it, with
// ranges "a-z" (reversed ranges such as "z-a" accepted) and "\]" for a
// literal; a backslash makes the next byte literal.
//
// Masters match the patterns of the messages they send; the hub matches
// the messages it makes itself (keyspace notifications) and PUBLISH's
// receiver count, which must agree with what the masters do. It does so
// with patterns compiled once (glob, below), which give Match's results in
// linear time; Match is their reference, as Redis's own algorithm. So
// Redis's quirks are kept: an unterminated "[" set ends at the pattern's end ("["
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

// MaxPatternLen bounds a PSUBSCRIBE pattern, in bytes. With the compiled
// matcher below it bounds what a pattern keeps (glob.tab: 2 KiB per 64
// tokens between stars) more than the time to match it, which is linear
// in the channel's length whatever the pattern.
const MaxPatternLen = 256

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (b *byteSet) add(c byte)      { b[c>>6] |= 1 << (c & 63) }
func (b *byteSet) has(c byte) bool { return b[c>>6]>>(c&63)&1 != 0 }

// glob is a pattern compiled for matching in time linear in the channel's
// length, with the result Match gives (tested against it and against a
// real redis-server). Redis's stringmatchlen, which Match copies, takes up
// to len(pattern) × len(channel) steps (a star before a long literal run
// retries the run at every byte of the channel): 10,000 patterns of 4 KiB
// made one PUBLISH take half a second of the event loop.
//
// Match reads a pattern as tokens, each consuming one byte of the channel
// ("?", a set, a literal; how Redis parses sets and backslashes is fixed
// by the pattern alone) or none (a run of stars). Once a star has matched
// the earliest possible occurrence of what follows it, a later one cannot
// do better (Redis's skipLongerMatches says the same): so the run before
// the first star is matched at the start, the run after the last at the
// end, and each run between two stars at its leftmost occurrence after
// the one before, found by shift-and (one bit per token, the words of its
// run per byte of the channel). The only quirk left: an empty channel
// matches the empty pattern only, not "*".
type glob struct {
	empty       bool      // the pattern is ""
	star        bool      // it has a star
	first, last []byteSet // the runs before the first and after the last star (all of it without a star)
	mid         []span    // the runs between stars, as bits of tab
	words       int       // tab's words per byte value
	tab         []uint64  // tab[c*words+k/64] bit k%64: mid token k accepts byte c
}

// span is a run between two stars: tokens (bits) a to b-1 of glob.tab.
type span struct{ a, b int }

// compileGlob parses pattern exactly as match reads it.
func compileGlob(p string) *glob {
	g := &glob{empty: p == ""}
	var runs [][]byteSet
	var cur []byteSet
	at := func(k int) byte {
		if k < len(p) {
			return p[k]
		}
		return 0
	}
	for i := 0; i < len(p); i++ {
		var set byteSet
		switch p[i] {
		case '*':
			for i+1 < len(p) && p[i+1] == '*' {
				i++
			}
			runs = append(runs, cur)
			cur = nil
			g.star = true
			continue
		case '?':
			for k := range set {
				set[k] = ^uint64(0)
			}
		case '[':
			i++
			not := at(i) == '^'
			if not {
				i++
			}
			for {
				if at(i) == '\\' && len(p)-i >= 2 {
					i++
					set.add(p[i])
				} else if at(i) == ']' {
					break
				} else if i >= len(p) {
					i-- // unterminated: the set ends with the pattern
					break
				} else if len(p)-i >= 3 && p[i+1] == '-' {
					lo, hi := int8(p[i]), int8(p[i+2])
					if lo > hi {
						lo, hi = hi, lo
					}
					for c := int(lo); c <= int(hi); c++ {
						set.add(byte(int8(c)))
					}
					i += 2
				} else {
					set.add(p[i])
				}
				i++
			}
			if not {
				for k := range set {
					set[k] = ^set[k]
				}
			}
		case '\\':
			if len(p)-i >= 2 {
				i++
			}
			set.add(p[i])
		default:
			set.add(p[i])
		}
		cur = append(cur, set)
	}
	runs = append(runs, cur)
	g.first, g.last = runs[0], runs[len(runs)-1]
	if !g.star {
		return g
	}
	n := 0
	for _, r := range runs[1 : len(runs)-1] {
		g.mid = append(g.mid, span{n, n + len(r)})
		n += len(r)
	}
	if n == 0 {
		return g
	}
	g.words = (n + 63) / 64
	g.tab = make([]uint64, 256*g.words)
	k := 0
	for _, r := range runs[1 : len(runs)-1] {
		for _, set := range r {
			for c := range 256 {
				if set.has(byte(c)) {
					g.tab[c*g.words+k/64] |= 1 << (k % 64)
				}
			}
			k++
		}
	}
	return g
}

// runAt reports whether run matches s at its start (len(s) >= len(run)).
func runAt(run []byteSet, s string) bool {
	for k := range run {
		if !run[k].has(s[k]) {
			return false
		}
	}
	return true
}

// match is Match(pattern, s) for the pattern g was compiled from, in
// O(len(pattern) + len(s) × words of the longest run between stars).
func (g *glob) match(s string) bool {
	if s == "" {
		return g.empty
	}
	if !g.star {
		return len(s) == len(g.first) && runAt(g.first, s)
	}
	if len(s) < len(g.first)+len(g.last) || !runAt(g.first, s) || !runAt(g.last, s[len(s)-len(g.last):]) {
		return false
	}
	lo, hi := len(g.first), len(s)-len(g.last)
	for _, sp := range g.mid {
		end := g.find(sp, s[lo:hi])
		if end < 0 {
			return false
		}
		lo += end
	}
	return true
}

// find returns the end of the leftmost occurrence of run sp in s, or -1:
// shift-and over the run's bits, which are bits sp.a to sp.b-1 of tab's
// words w0 to w1. Bits shifted past sp.b-1 only move up and out, and are
// never read.
func (g *glob) find(sp span, s string) int {
	w0, w1 := sp.a/64, (sp.b-1)/64
	first, last := uint64(1)<<(sp.a%64), uint64(1)<<((sp.b-1)%64)
	var buf [MaxPatternLen/64 + 1]uint64
	d := buf[:]
	if g.words > len(buf) { // a pattern over MaxPatternLen (Match's tests)
		d = make([]uint64, g.words)
	}
	for j := 0; j < len(s); j++ {
		row := g.tab[int(s[j])*g.words:]
		for w := w1; w > w0; w-- {
			d[w] = (d[w]<<1 | d[w-1]>>63) & row[w]
		}
		d[w0] = (d[w0]<<1 | first) & row[w0]
		if d[w1]&last != 0 {
			return j + 1
		}
	}
	return -1
}
