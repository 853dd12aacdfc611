package resp

import (
	"strings"
	"testing"
)

// TestParseEveryPrefixIsIncomplete: a reply cut anywhere is incomplete,
// never malformed or mistaken for a shorter reply, and the whole of it
// parses to exactly its length, whatever follows.
func TestParseEveryPrefixIsIncomplete(t *testing.T) {
	rng := newRand(t)
	for i := 0; i < 2000; i++ {
		want := randReply(rng, 0, false)
		enc := string(AppendReply(nil, want, false))
		for cut := 0; cut < len(enc); cut++ {
			if _, _, err := Parse([]byte(enc[:cut])); err != ErrIncomplete {
				t.Fatalf("%q cut at %d: %v, want incomplete", enc, cut, err)
			}
		}
		got, n, err := Parse([]byte(enc + "+extra\r\n"))
		if err != nil || n != len(enc) || !got.Equal(want) {
			t.Fatalf("%q: got %v n=%d err=%v, want %v", enc, got, n, err, want)
		}
	}
}

// TestParseHostile: what a broken or hostile master (or something else
// listening on its address) may send is malformed or incomplete; nothing
// panics, and nothing is allocated from a declared length before the
// bytes are there.
func TestParseHostile(t *testing.T) {
	nested := strings.Repeat("*1\r\n", MaxDepth+2) + ":1\r\n"
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"?x\r\n", ErrMalformed},
		{":abc\r\n", ErrMalformed},
		{":\r\n", ErrMalformed},
		{":-\r\n", ErrMalformed},
		{":9223372036854775808\r\n", ErrMalformed},
		{"$-5\r\n", ErrMalformed},
		{"$3\r\nabcd\r\n", ErrMalformed},
		{"$x\r\n", ErrMalformed},
		{"*-2\r\n", ErrMalformed},
		{"*1\r\n?\r\n", ErrMalformed},
		{nested, ErrMalformed},
		// Once panics of the old parser: a CRLF right after the type
		// byte's place, and a length that overflows the index.
		{"\r\n", ErrIncomplete},
		{"\r\n\r\n", ErrMalformed},
		{"$9223372036854775807\r\nx\r\n", ErrIncomplete},
		{"$9223372036854775806\r\n", ErrIncomplete},
		// An array count that would allocate terabytes.
		{"*4611686018427387904\r\n:1\r\n", ErrIncomplete},
		{"*9223372036854775807\r\n", ErrIncomplete},
		// RESP3 from a master spoken to in RESP2.
		{"_\r\n", ErrMalformed},
		{"%1\r\n+a\r\n+b\r\n", ErrMalformed},
	} {
		if _, _, err := Parse([]byte(tc.in)); err != tc.want {
			t.Errorf("%q: %v, want %v", tc.in, err, tc.want)
		}
	}
	ok := strings.Repeat("*1\r\n", MaxDepth) + ":1\r\n"
	if _, n, err := Parse([]byte(ok)); err != nil || n != len(ok) {
		t.Errorf("%d levels of nesting: %v", MaxDepth, err)
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"+7", 7, true}, {"-12", -12, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false}, {"", 0, false}, {"-", 0, false},
		{"1 ", 0, false}, {"0x1", 0, false}, {"1_000", 0, false},
	} {
		if got, ok := parseInt([]byte(tc.in)); got != tc.want || ok != tc.ok {
			t.Errorf("parseInt(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParse3(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Reply
	}{
		{"_\r\n", ReplyNil},
		{",3.14\r\n", Reply{Type: Double, Str: []byte("3.14")}},
		{",-inf\r\n", Reply{Type: Double, Str: []byte("-inf")}},
		{"#t\r\n", Reply{Type: Boolean, Int: 1}},
		{"#f\r\n", Reply{Type: Boolean}},
		{"(-123456789012345678901234567890\r\n", Reply{Type: BigNumber, Str: []byte("-123456789012345678901234567890")}},
		{"!8\r\nERR a\r\nb\r\n", Reply{Type: Error, Str: []byte("ERR a\r\nb")}},
		{"=9\r\ntxt:hello\r\n", Reply{Type: Verbatim, Str: []byte("hello")}},
		{"%1\r\n+a\r\n:1\r\n", Reply{Type: Map, Elems: []Reply{{Type: Status, Str: []byte("a")}, {Type: Integer, Int: 1}}}},
		{"~1\r\n$1\r\nx\r\n", Reply{Type: Set, Elems: []Reply{{Type: Bulk, Str: []byte("x")}}}},
		{">2\r\n$7\r\nmessage\r\n_\r\n", Reply{Type: Push, Elems: []Reply{{Type: Bulk, Str: []byte("message")}, ReplyNil}}},
	} {
		got, n, err := Parse3([]byte(tc.in))
		if err != nil || n != len(tc.in) || !got.Equal(tc.want) {
			t.Errorf("%q: %v n=%d %v, want %v", tc.in, got, n, err, tc.want)
		}
	}
	for _, bad := range []string{"_x\r\n", ",\r\n", "#x\r\n", "(\r\n", "(1.5\r\n", "!-1\r\n", "=3\r\ntxt\r\n", "%-1\r\n", "|1\r\n+a\r\n+b\r\n"} {
		if _, _, err := Parse3([]byte(bad)); err != ErrMalformed {
			t.Errorf("%q: %v, want malformed", bad, err)
		}
	}
}

// TestParseHotPathAllocatesNothing: the replies lock commands get are
// parsed without allocating.
func TestParseHotPathAllocatesNothing(t *testing.T) {
	for _, in := range []string{"+OK\r\n", "$-1\r\n", "*-1\r\n", ":1\r\n", ":0\r\n", ":-2\r\n"} {
		b := []byte(in)
		if n := testing.AllocsPerRun(100, func() { Parse(b) }); n != 0 {
			t.Errorf("%q: %.0f allocations", in, n)
		}
	}
}
