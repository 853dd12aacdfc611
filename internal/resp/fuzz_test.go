package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// Fuzz tests of what a client or a master can send:
//
//	go test -run XXX -fuzz FuzzCommandStream -fuzztime 60s ./internal/resp/
//	go test -run XXX -fuzz FuzzParse -fuzztime 60s ./internal/resp/
//	go test -run XXX -fuzz FuzzSplitInline -fuzztime 60s ./internal/resp/
//	go test -run XXX -fuzz FuzzReader -fuzztime 60s ./internal/resp/

// FuzzCommandStream: whatever a client sends, the Guard hands on a prefix
// of it made of whole commands within the limits, the same however the
// bytes arrive; NextCommand splits that prefix, and so does redcon's reader
// (behind the Guard on TLS connections), without panicking, spinning or
// leaving half a command.
func FuzzCommandStream(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nPING\r\n",
		"*1\r\n$9223372036854775807\r\nx",
		"*4611686018427387904\r\n",
		"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
		"*-1\r\n", "*0\r\n", "$3\r\nabc\r\n", "SET \"a b\" 'c'\r\n", "\r\n\r\n", "*1\r\n+OK\r\n",
		"*1\r\n$3\r\nabcd\r\n", "*9\r\n", "*2\r\n$65\r\n", "GET \"\\x41\"\n", "a\"b c\"\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	l := Limits{MaxBulk: 64, MaxArgs: 8, MaxCommand: 512, ReadAhead: 1024}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, errWhole := guardAll(l, data, len(data)+1, 4096)
		bits, errBits := guardAll(l, data, int(chunk%13)+1, int(chunk%7)+1)
		if !bytes.Equal(whole, bits) || fmt.Sprint(errWhole) != fmt.Sprint(errBits) {
			t.Fatalf("depends on how bytes arrive: %q (%v) vs %q (%v)", whole, errWhole, bits, errBits)
		}
		if !bytes.HasPrefix(data, whole) {
			t.Fatalf("handed on %q, not a prefix of the input", whole)
		}
		var pe *ProtocolError
		if !errors.Is(errWhole, io.EOF) && !errors.As(errWhole, &pe) {
			t.Fatalf("stopped with %v", errWhole)
		}
		checkSplit(t, l, bytes.Clone(whole))
		checkRedcon(t, l, whole)
	})
}

// checkSplit splits validated commands with NextCommand: multibulk ones
// within the limits, inline ones within the line limit.
func checkSplit(t *testing.T, l Limits, b []byte) {
	var args [][]byte
	for len(b) > 0 {
		inline := b[0] != '*'
		var err error
		if args, b, err = NextCommand(b, args); err != nil {
			if err != errUnbalanced {
				t.Fatalf("NextCommand: %v", err)
			}
			return // the only check the guard leaves to the splitter
		}
		if !inline && (len(args) == 0 || int64(len(args)) > l.MaxArgs) {
			t.Fatalf("NextCommand split %d arguments, limit %d", len(args), l.MaxArgs)
		}
		for _, a := range args {
			if len(a) > max(int(l.MaxBulk), inlineMax) {
				t.Fatalf("NextCommand split a %d-byte argument", len(a))
			}
		}
	}
}

func checkRedcon(t *testing.T, l Limits, b []byte) {
	rd := redcon.NewReader(bytes.NewReader(b))
	for {
		cmds, err := rd.ReadCommands()
		for _, c := range cmds {
			for _, a := range c.Args {
				if len(a) > max(int(l.MaxBulk), inlineMax) {
					t.Fatalf("redcon got a %d-byte argument", len(a))
				}
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			// redcon's inline quoting, stricter than Redis's.
			if !strings.Contains(err.Error(), "unbalanced quotes") {
				t.Fatalf("redcon: %v on %q", err, b)
			}
			return
		}
	}
}

// FuzzParse: any bytes parse as one reply, incomplete or malformed,
// without panicking; a reply parsed encodes to bytes that parse back to
// it, every prefix of which is incomplete.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "$-1\r\n", ":1\r\n", "*2\r\n$1\r\na\r\n:-3\r\n", "-ERR x\r\n", "\r\n",
		"$9223372036854775807\r\nx\r\n", "*4611686018427387904\r\n", "%1\r\n+a\r\n#t\r\n",
		"=7\r\ntxt:abc\r\n", ",1.5\r\n", "(123\r\n", "_\r\n", "~1\r\n>1\r\n!1\r\nx\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) (Reply, int, error){Parse, Parse3} {
			r, n, err := parse(b)
			if err != nil {
				if err != ErrIncomplete && err != ErrMalformed {
					t.Fatalf("%q: %v", b, err)
				}
				continue
			}
			if n <= 0 || n > len(b) {
				t.Fatalf("%q: used %d bytes", b, n)
			}
			// Compared encoded: the encoder replaces line breaks that a
			// lenient parse let into simple strings.
			enc := AppendReply(nil, r, true)
			again, m, err := Parse3(enc)
			if err != nil || m != len(enc) || !bytes.Equal(AppendReply(nil, again, true), enc) {
				t.Fatalf("%q parsed as %v, encoded %q, parsed again as %v (%v)", b, r, enc, again, err)
			}
			for cut := range len(enc) {
				if _, _, err := Parse3(enc[:cut]); err != ErrIncomplete {
					t.Fatalf("%q cut at %d: %v", enc, cut, err)
				}
			}
		}
	})
}

// FuzzSplitInline: any line splits without panicking into arguments no
// longer than it, and arguments quoted as Redis quotes them split back
// the same.
func FuzzSplitInline(f *testing.F) {
	for _, c := range inlineCases {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		args, err := SplitInline(bytes.Clone(line), nil)
		if err != nil {
			if err != errUnbalanced || len(args) != 0 {
				t.Fatalf("%q: %q, %v", line, args, err)
			}
			return
		}
		total := 0
		var quoted []byte
		for _, a := range args {
			total += len(a)
			quoted = append(append(quoted, quoteInline(a)...), ' ')
		}
		if total > len(line) {
			t.Fatalf("%q: %d bytes of arguments", line, total)
		}
		again, err := SplitInline(quoted, nil)
		if err != nil || !equalCommands([][][]byte{again}, [][][]byte{args}) {
			t.Fatalf("%q split as %q, quoted %q, split again as %q (%v)", line, args, quoted, again, err)
		}
	})
}

// FuzzReader: the Reader with a subscribed connection's limits (pubsub)
// never panics, keeps no bulk string over MaxBulk and no array over
// MaxElems or MaxDepth, whatever a master sends (a simple string is
// bounded by the buffer instead).
func FuzzReader(f *testing.F) {
	f.Add([]byte("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"))
	f.Add([]byte("*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$2\r\nch\r\n$100\r\nx\r\n"))
	f.Add([]byte("+OK\r\n-ERR x\r\n:1\r\n$-1\r\n*-1\r\n"))
	f.Add([]byte("*17\r\n"))
	f.Add([]byte("*1\r\n*1\r\n:1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := NewReader(bytes.NewReader(b), 16)
		rd.MaxBulk, rd.MaxElems, rd.MaxDepth = 8, 4, 1
		for range 64 {
			r, err := rd.Next()
			if err != nil {
				return
			}
			if (r.Type == Bulk && len(r.Str) > 8) || len(r.Elems) > 4 {
				t.Fatalf("kept %v over the limits", r)
			}
			for _, e := range r.Elems {
				if (e.Type == Bulk && len(e.Str) > 8) || len(e.Elems) > 0 {
					t.Fatalf("kept an element %v over the limits", e)
				}
			}
		}
	})
}
