package pubsub

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// globCases are read from stringmatchlen and confirmed against a real
// redis-server by TestMatchAgainstRedis.
var globCases = []struct {
	pattern, s string
	want       bool
}{
	{"*", "anything", true},
	{"*", "", false}, // the loop never starts on an empty string
	{"", "", true},
	{"", "a", false},
	{"a*", "a", true},
	{"a**", "a", true},
	{"*a", "a", true},
	{"a*b*c", "aXbYc", true},
	{"a*b*c", "aXbY", false},
	{"h?llo", "hello", true},
	{"h?llo", "hllo", false},
	{"h[ae]llo", "hallo", true},
	{"h[ae]llo", "hillo", false},
	{"h[^e]llo", "hallo", true},
	{"h[^e]llo", "hello", false},
	{"h[a-b]llo", "hbllo", true},
	{"h[b-a]llo", "hbllo", true}, // reversed range
	{"h[a-b]llo", "hcllo", false},
	{`h\*llo`, "h*llo", true},
	{`h\*llo`, "hello", false},
	{`[\]]`, "]", true},
	{`[a\-z]`, "-", true},
	{`[a\-z]`, "b", false},
	{"[", "[", false},   // unterminated set: nothing
	{"[^", "x", true},   // unterminated negated set: any one byte
	{"[a", "a", true},   // unterminated set ends with the pattern
	{"[]", "]", false},  // an empty set
	{"[]]", "]", false}, // the empty set, then a literal ]
	{"a\\", "a\\", true},
	{"a\\", "a", false},
	{"[a-]", "-", false}, // "a-]" is not a range: a, then the set ends... at ]
	{"[-a]", "-", true},
	{"*[", "ab", false},
	{"a*a*a*a*a*a*a*b", strings.Repeat("a", 40), false},
	{"\xff", "\xff", true},
	{"[a-\xff]", "b", false}, // signed char: the range is -1..97
	{"[a-\xff]", "\xff", true},
	{"[a-\xff]", "\x80", false},
	{"[\x80-a]", "\x90", true},
	{"__keyspace@0__:*", "__keyspace@0__:lock", true},
	{"redisson_lock__channel:{*}", "redisson_lock__channel:{L}", true},
}

func TestMatchTable(t *testing.T) {
	for _, c := range globCases {
		if got := Match(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// redisMatches asks a real redis-server which of patterns match each of
// channels: PSUBSCRIBE them all, PUBLISH each channel, read the pmessages.
func redisMatches(t *testing.T, m *redisproc.Server, patterns, channels []string) map[[2]string]bool {
	t.Helper()
	const end = "\x00end"
	sub, pub := dialRaw(t, m.Addr), dialRaw(t, m.Addr)
	sub.send(t, append([]string{"PSUBSCRIBE"}, patterns...)...)
	for range patterns {
		sub.next(t)
	}
	sub.send(t, "SUBSCRIBE", end)
	sub.next(t)
	for _, c := range channels {
		pub.send(t, "PUBLISH", c, "x")
		pub.next(t)
	}
	pub.send(t, "PUBLISH", end, "x")
	pub.next(t)
	got := map[[2]string]bool{}
	for {
		p := sub.next(t)
		if string(p.Elems[0].Str) == "message" {
			return got
		}
		if ch := string(p.Elems[2].Str); ch != end {
			got[[2]string{string(p.Elems[1].Str), ch}] = true
		}
	}
}

func TestMatchAgainstRedis(t *testing.T) {
	m := redisproc.ForTest(t, 1)[0]

	t.Run("table", func(t *testing.T) {
		for _, c := range globCases {
			truth := redisMatches(t, m, []string{c.pattern}, []string{c.s})
			if truth[[2]string{c.pattern, c.s}] != c.want {
				t.Errorf("redis says %q matches %q: %v; the table says %v", c.pattern, c.s, !c.want, c.want)
			}
		}
	})

	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		gen := func(alphabet []string, maxLen int, seen map[string]bool) string {
			for {
				var b strings.Builder
				for range rng.IntN(maxLen + 1) {
					b.WriteString(alphabet[rng.IntN(len(alphabet))])
				}
				if s := b.String(); !seen[s] {
					seen[s] = true
					return s
				}
			}
		}
		pa := []string{"a", "b", "*", "?", "[", "]", "^", "-", `\`, "\xff", "\x80"}
		sa := []string{"a", "b", "]", "^", "-", `\`, "*", "\xff", "\x80", "z"}
		var patterns, channels []string
		ps, cs := map[string]bool{}, map[string]bool{}
		for range 400 {
			patterns = append(patterns, gen(pa, 7, ps))
		}
		for range 150 {
			channels = append(channels, gen(sa, 5, cs))
		}
		truth := redisMatches(t, m, patterns, channels)
		if len(truth) < 500 {
			t.Fatalf("only %d matching pairs: the sample does not exercise matching", len(truth))
		}
		t.Logf("%d of %d pairs match", len(truth), len(patterns)*len(channels))
		bad := 0
		for _, p := range patterns {
			for _, c := range channels {
				if want := truth[[2]string{p, c}]; Match(p, c) != want && bad < 20 {
					bad++
					t.Errorf("Match(%q, %q) = %v, redis says %v", p, c, !want, want)
				}
				if want := truth[[2]string{p, c}]; compileGlob(p).match(c) != want && bad < 20 {
					bad++
					t.Errorf("compiled %q on %q = %v, redis says %v", p, c, !want, want)
				}
			}
		}
	})
}
