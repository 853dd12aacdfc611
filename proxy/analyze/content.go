package analyze

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The probe values of the lock's keys and of its token are 13-digit
// numbers. A script may branch on what clients really send there: a key
// name longer than some bound, a token with a "force:" prefix or of a
// sha1's 40 bytes, a key holding a hash tag the script names ({short}).
// contentAlternatives reruns the uniform states with each key argument and
// the token set to other contents, and refuses a script that then treats
// the lock otherwise: the verdict is trusted for every call, whatever its
// key and token.

// contentLengths are the lengths tried for keys and tokens, besides the
// script's small numeric constants and their neighbours: the empty string
// (Redis takes it as a token and as a key name, and a branch on it once
// hid a force acquisition and a lock without an expiry:
// TestEmptyTokenOrKeyBranchesRefused), a one-byte id, a 16-byte hex id, a
// UUID, a sha1 in hex, a 64-byte random string, and long key names.
var contentLengths = []int{0, 1, 16, 36, 40, 64, 128, 256}

// maxContentLength bounds the lengths taken from the script's constants.
const maxContentLength = 512

// maxContentValues bounds the contents tried per argument.
const maxContentValues = 160

// contentValues are the contents argument p (probe value v) is tried with:
// each string constant of the script as the whole value, and as both a
// prefix and a suffix of v (c..v..c, which also contains c: string.find
// with plain set, string.sub; the analyzer runs no Lua patterns), and
// strings of contentLengths and of the lengths the script's numeric
// constants name. None is another argument's value or the name of a key
// the runs use. full: there were more than maxContentValues.
func (a *analysis) contentValues(v string, avoid func(string) bool) (out []string, full bool) {
	seen := map[string]bool{v: true}
	add := func(s string) {
		switch {
		case seen[s] || avoid(s):
		case len(out) >= maxContentValues:
			full = true
		default:
			seen[s] = true
			out = append(out, s)
		}
	}
	lengths := map[int]bool{}
	for _, l := range contentLengths {
		lengths[l] = true
	}
	for _, c := range a.consts {
		if n, ok := parseInt(c); ok {
			for _, l := range []int64{n - 1, n, n + 1} {
				if l > 0 && l <= maxContentLength {
					lengths[int(l)] = true
				}
			}
		}
	}
	var ls []int
	for l := range lengths {
		ls = append(ls, l)
	}
	sort.Ints(ls)
	for _, l := range ls {
		for ch := byte('t'); ch <= 'z'; ch++ {
			if s := strings.Repeat(string(ch), l); !seen[s] && !avoid(s) {
				add(s)
				break
			}
		}
	}
	for _, c := range a.consts {
		if c == "" {
			continue
		}
		add(c)
		if _, num := parseInt(c); !num {
			// one value for a prefix, a suffix and a substring: the
			// probe values are digits, never these
			add(c + v + c)
		}
	}
	return out, full
}

// contentAlternatives tries every key argument (the lock's and the others
// the script uses) and the token with the contents above; f and base are
// the lock and the uniform states of alternatives.
func (a *analysis) contentAlternatives(sem *Semantics, f *finding, base []judged, keys map[string]bool) error {
	saved := append([]string(nil), a.vals...)
	a.judgedVals = saved
	defer func() { a.vals, a.cache, a.judgedVals = saved, map[string]*obs{}, nil }()
	avoid := func(s string) bool { return valueIn(s, saved) || keys[s] }
	var roles []int
	for _, k := range append(append([]Arg(nil), sem.LockKeys...), sem.AuxKeys...) {
		if p := a.posOf(k); p >= 0 && p < len(saved) && !contains(roles, p) {
			roles = append(roles, p)
		}
	}
	tok := -1
	if f.token >= 0 && !f.tokenless && !contains(roles, f.token) {
		tok = f.token
		roles = append(roles, tok)
	}
	for _, p := range roles {
		what := "key"
		if p == tok {
			what = "token"
		}
		skip := avoid
		if p == tok && sem.Undo != nil {
			// A token equal to a member the script writes besides the
			// token (Symfony's "__write__") is the script's own marker:
			// the proxy refuses such a call (catalog.Script.UndoExtra).
			skip = func(s string) bool {
				for _, m := range sem.Undo.Members {
					if m.Arg.IsZero() && m.Const == s {
						return true
					}
				}
				return avoid(s)
			}
		}
		vals, full := a.contentValues(saved[p], skip)
		if full {
			return &Refusal{Class: ClassBehaviour, Arg: posName(p, a.nkeys),
				Reason: fmt.Sprintf("the script has more constants than the %d contents the analyzer tries for its %s %s (a script may branch on the %s's content)", maxContentValues, what, posName(p, a.nkeys), what)}
		}
		if p == tok && tok >= a.nkeys {
			vals = append(vals, a.keyNamesAsToken(sem, saved, vals)...)
		}
		for _, v := range vals {
			a.vals = append([]string(nil), saved...)
			a.vals[p] = v
			a.cache = map[string]*obs{}
			g := *f
			if p == tok {
				g.tok = v
			}
			with := fmt.Sprintf("with the %s %s = %s", what, posName(p, a.nkeys), quoteClip(v))
			if q := slices.Index(saved, v); q >= 0 && q < a.nkeys {
				with = fmt.Sprintf("with the %s %s equal to %s (the key's name)", what, posName(p, a.nkeys), posName(q, a.nkeys))
			}
			for _, j := range base {
				if err := a.sameWithAs(sem, f, &g, j, j.o.s, with, false); err != nil {
					return err
				}
			}
			if p == tok && isWord(v) {
				if err := a.wordHolders(sem, f, &g, base, with); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// keyNamesAsToken are the names of the lock's KEYS, tried as its token
// when the token is an ARGV: a client may pass the key's name as its
// token, and a script may branch on ARGV[1] == KEYS[1]
// (TestTokenEqualToKeyNameBranchesRefused). The runs still put what is
// done to the key down to its KEYS argument, which comes first.
func (a *analysis) keyNamesAsToken(sem *Semantics, saved, tried []string) []string {
	var out []string
	for _, k := range sem.LockKeys {
		if p := a.posOf(k); p >= 0 && p < a.nkeys && !slices.Contains(tried, saved[p]) && !slices.Contains(out, saved[p]) {
			out = append(out, saved[p])
		}
	}
	return out
}

// isWord reports whether v is one of the contents of contentLengths
// (empty, or a letter from t to z repeated), which tonumber reads as nil.
func isWord(v string) bool { return v == "" || (v[0] >= 't' && v[0] <= 'z') }

// wordHolders reruns the uniform states with the caller's token a word
// (in g) and the other holders' tokens words too: real tokens are all
// words or all numbers, and a script comparing them through tonumber
// (nil == nil) acts on every word holder's lock (found by review:
// TestTokensComparedAsNumbersRefused).
func (a *analysis) wordHolders(sem *Semantics, f, g *finding, base []judged, with string) error {
	a.wordOthers, a.cache = true, map[string]*obs{}
	defer func() { a.wordOthers, a.cache = false, map[string]*obs{} }()
	with += " (and other holders' tokens no numbers either)"
	for _, j := range base {
		if err := a.sameWithAs(sem, f, g, j, j.o.s, with, false); err != nil {
			return err
		}
	}
	return nil
}

// quoteClip quotes s, clipped to 48 bytes with its length said.
func quoteClip(s string) string {
	if len(s) <= 48 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:40]), len(s))
}
