package resp

import (
	"strings"
	"testing"
)

// inlineCases is Redis's inline grammar (sdssplitargs), case by case; nil
// want means unbalanced quotes. redis_test.go sends the same lines to a
// real redis-server.
var inlineCases = []struct {
	line string
	want []string
}{
	{"SET k v", []string{"SET", "k", "v"}},
	{"  SET   k\tv  ", []string{"SET", "k", "v"}},
	{"", []string{}},
	{" \t ", []string{}},
	{`"a b" c`, []string{"a b", "c"}},
	{`'a b' c`, []string{"a b", "c"}},
	{`"a\nb\r\t\b\a"`, []string{"a\nb\r\t\b\a"}},
	{`"\x41\x4a\x4A\x00z"`, []string{"AJJ\x00z"}},
	{`"\x4"`, []string{"x4"}},
	{`"\x"`, []string{"x"}},
	{`"\xzz"`, []string{"xzz"}},
	{`"\X41"`, []string{"X41"}},
	{`"\q\\\""`, []string{`q\"`}},
	{`'it\'s'`, []string{"it's"}},
	{`'a\nb\\ '`, []string{`a\nb\\ `}},
	{`'a\nb\\'`, nil}, // the second \ escapes the closing quote: left open
	{`""`, []string{""}},
	{`"" ''`, []string{"", ""}},
	{`a"b c"`, []string{"ab c"}},
	{`a'b c' d`, []string{"ab c", "d"}},
	{`a"b"c`, nil},
	{`"a"b`, nil},
	{`'a'b`, nil},
	{`"abc`, nil},
	{`'abc`, nil},
	{`"abc\"`, nil},
	{`"abc\`, nil},
	{"a\vb", []string{"a\vb"}},
	{"a\fb", []string{"a\fb"}},
	{"\va", []string{"a"}},
	{"\"a\"\vb", []string{"a", "b"}},
	{"'a'\fb", []string{"a", "b"}},
	{"a\rb", []string{"a", "b"}},
	{"\xff\xfe \x80", []string{"\xff\xfe", "\x80"}},
	{"\"\xff\"", []string{"\xff"}},
}

func TestSplitInline(t *testing.T) {
	for _, tc := range inlineCases {
		args, err := SplitInline([]byte(tc.line), nil)
		if tc.want == nil {
			if err == nil || err.Error() != "ERR Protocol error: unbalanced quotes in request" {
				t.Errorf("%q: %q, %v; want unbalanced quotes", tc.line, args, err)
			}
			continue
		}
		if err != nil || !equalStrings(args, tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.line, args, err, tc.want)
		}
	}
}

// TestSplitInlineNUL: a NUL byte is an ordinary byte, quoted or not.
func TestSplitInlineNUL(t *testing.T) {
	for line, want := range map[string][]string{
		"a\x00b c":    {"a\x00b", "c"},
		"a \x00 b":    {"a", "\x00", "b"},
		"\x00abc":     {"\x00abc"},
		"'a\x00b' c":  {"a\x00b", "c"},
		"\"a\x00\" c": {"a\x00", "c"},
		"\"a\x00":     nil,
	} {
		args, err := SplitInline([]byte(line), nil)
		if (want == nil) != (err != nil) || (want != nil && !equalStrings(args, want)) {
			t.Errorf("%q: %q, %v; want %q", line, args, err, want)
		}
	}
}

// TestNextCommandInline: line ends, blank lines and the rest of the
// buffer.
func TestNextCommandInline(t *testing.T) {
	b := []byte("PING\r\n\r\n\nSET 'a b' c\n  \r\n*1\r\n$4\r\nPING\r\nGET \"x\r\n")
	var got []string
	var args [][]byte
	var err error
	for len(b) > 0 && err == nil {
		args, b, err = NextCommand(b, args)
		got = append(got, strings.Join(toStrings(args), "|"))
	}
	want := []string{"PING", "", "", "SET|a b|c", "", "PING", ""}
	if err == nil || !equalStrings(toBytes(got), want) || len(b) != 0 {
		t.Fatalf("got %q, rest %q, %v; want %q then unbalanced quotes", got, b, err, want)
	}
}

func TestSplitInlineAllocatesNothing(t *testing.T) {
	line := []byte(`SET "key \x41" 'tok' NX PX 100`)
	buf := make([]byte, len(line))
	args := make([][]byte, 0, 8)
	if n := testing.AllocsPerRun(100, func() {
		copy(buf, line)
		args, _ = SplitInline(buf, args[:0])
	}); n != 0 {
		t.Fatalf("%.0f allocations", n)
	}
}

func toStrings(args [][]byte) []string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = string(a)
	}
	return s
}

func toBytes(s []string) [][]byte {
	b := make([][]byte, len(s))
	for i, a := range s {
		b[i] = []byte(a)
	}
	return b
}

func equalStrings(args [][]byte, want []string) bool {
	if len(args) != len(want) {
		return false
	}
	for i := range args {
		if string(args[i]) != want[i] {
			return false
		}
	}
	return true
}
