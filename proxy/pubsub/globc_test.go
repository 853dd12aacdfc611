package pubsub

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestCompiledGlobAgreesWithMatch: the compiled matcher gives Match's
// answer (Match is checked against a real redis-server in glob_test.go)
// on the table, on random short patterns over the bytes that matter to
// the parser, and on long ones whose runs between stars span several
// words.
func TestCompiledGlobAgreesWithMatch(t *testing.T) {
	for _, c := range globCases {
		if got := compileGlob(c.pattern).match(c.s); got != c.want {
			t.Errorf("compiled %q on %q = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	gen := func(alphabet []string, maxLen int) string {
		var b strings.Builder
		for range rng.IntN(maxLen + 1) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	pa := []string{"a", "b", "*", "?", "[", "]", "^", "-", `\`, "\xff", "\x80", "a", "b", "*"}
	sa := []string{"a", "b", "]", "^", "-", `\`, "*", "\xff", "\x80", "z"}
	long := []string{"a", "b", "a", "b", "a", "?", "*", "[ab]", "[^a]"}
	bad := 0
	for i := range 60_000 {
		p, s := gen(pa, 9), gen(sa, 8)
		if i%3 == 0 {
			p, s = gen(long, 300), gen([]string{"a", "b", "c"}, 600)
		}
		if want := Match(p, s); compileGlob(p).match(s) != want && bad < 20 {
			bad++
			t.Errorf("compiled %q on %q = %v, Match says %v", p, s, !want, want)
		}
	}
}
