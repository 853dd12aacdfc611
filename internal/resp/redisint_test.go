package resp

import (
	"strconv"
	"testing"
)

// TestParseRedisInt: the integers Redis's string2ll reads, and only those.
func TestParseRedisInt(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true}, {"1", 1, true}, {"5000", 5000, true}, {"-1", -1, true}, {"-5000", -5000, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false}, {"99999999999999999999", 0, false},
		{"", 0, false}, {"-", 0, false}, {"+", 0, false}, {"+5000", 0, false}, {"+0", 0, false}, {"-0", 0, false},
		{"05000", 0, false}, {"00", 0, false}, {"-05", 0, false}, {" 5", 0, false}, {"5 ", 0, false},
		{"5.0", 0, false}, {"1e4", 0, false}, {"0x10", 0, false}, {"1_000", 0, false}, {"0000000000000000000001", 0, false},
	} {
		n, ok := ParseRedisInt([]byte(c.in))
		if n != c.n || ok != c.ok {
			t.Errorf("ParseRedisInt(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
		if ok {
			if back := strconv.FormatInt(n, 10); back != c.in {
				t.Errorf("ParseRedisInt(%q) took a form Redis would not write back (%q)", c.in, back)
			}
		}
	}
}

// FuzzParseRedisInt: what ParseRedisInt takes is exactly the canonical
// decimal form of an int64, which is what string2ll takes.
func FuzzParseRedisInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "+1", "05", "9223372036854775807", "-9223372036854775808", "12a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseRedisInt([]byte(s))
		v, err := strconv.ParseInt(s, 10, 64)
		canonical := err == nil && strconv.FormatInt(v, 10) == s
		if ok != canonical || (ok && n != v) {
			t.Fatalf("ParseRedisInt(%q) = %d, %v; canonical %v (%d)", s, n, ok, canonical, v)
		}
	})
}
