package catalog

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzNormalize: Normalize never panics; a normal form is its own normal
// form, with no raw line break or tab but the line break ending a
// shebang; CRLF line ends and an added comment do not change it.
//
//	go test -run XXX -fuzz FuzzNormalize -fuzztime 60s ./proxy/catalog/
func FuzzNormalize(f *testing.F) {
	c, err := New(nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range c.Scripts() {
		f.Add([]byte(s.Body))
	}
	for _, s := range []string{
		`x='\65\066\0677' y="\x41\z" z="a\` + "\r\n" + `b"`,
		"x=[==[a]]b]=]c]==] --[=[ c ]=] y=[[\r\nz]]",
		"local x = f\n(g)() f'a';('b'):len() a=1;b=2;",
		"redis.pcall('DEL', KEYS[1]) x.redis.pcall('GET') redis.call('GE'..'T')",
		"#!lua flags=no-writes\r\nreturn redis.call('get', KEYS[1])",
		"x=0x1F+1e-5+.5+3.+1..2 a...b ::l:: a~=b<=c>=d",
		"return [[a [[b]]",
		"return \"\\256\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n := Normalize(body)
		if again := Normalize([]byte(n)); again != n {
			t.Fatalf("not idempotent:\n in %q\n n1 %q\n n2 %q", body, n, again)
		}
		rest := n
		if strings.HasPrefix(n, "#!") {
			if i := strings.IndexByte(n, '\n'); i >= 0 {
				rest = n[i+1:]
			}
		}
		if strings.ContainsAny(rest, "\r\n\t") {
			t.Fatalf("normal form of %q has raw whitespace: %q", body, n)
		}
		if n == "" {
			return
		}
		// The same text with CRLF line ends and a trailing comment means the
		// same: Lua reads CRLF as LF everywhere, in long brackets and
		// escaped line breaks too.
		crlf := bytes.ReplaceAll(bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))
		if !bytes.Contains(body, []byte("\r")) && !bytes.HasPrefix(body, []byte("#!")) {
			if got := Normalize(append(crlf, "\n-- comment"...)); got != n {
				t.Fatalf("CRLF and a comment changed the normal form of %q:\n%q\n%q", body, n, got)
			}
		}
	})
}
