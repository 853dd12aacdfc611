package resp_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestInlineSameAsRedis sends inline lines to a real redis-server and
// splits the same lines with NextCommand: the argument lists (or the
// unbalanced-quotes error) must be the same. Each line is the tail of
// `EVAL "return ARGV" 0 <tail>`, so that Redis answers with the arguments
// it parsed; blanks before EVAL check the start of the line.
func TestInlineSameAsRedis(t *testing.T) {
	srv := redisproc.ForTest(t, 1)[0]
	r := &redisConn{t: t, addr: srv.Addr}
	defer r.close()
	tails := []string{
		`a b`, `"a b" 'c d'`, `"\x41\x4a\x00" '\''`, `"\x4" "\x" "\xzz" "\X41" "\q\\\""`,
		`'a\nb\\ '`, `'a\nb\\'`, `"" ''`, `a"b c"`, `a'b c' d`, `a"b"c`, `"a"b`, `'a'b`,
		`"abc`, `'abc`, `"abc\"`, `"abc\`, "a\vb", "a\fb", "\va", "\"a\"\vb", "'a'\fb",
		"a\rb", "a\r", "a\r\r", "\xff\xfe \x80", "\"\xff\"", "a\t\tb",
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), 2))
	for range 1500 {
		tails = append(tails, randLine(rng))
	}
	for _, tail := range tails {
		line := []byte("EVAL \"return ARGV\" 0 " + tail + "\r\n")
		if rng.IntN(4) == 0 {
			line = append([]byte(" \t\v"[:1+rng.IntN(3)]), line...)
		}
		want, wantErr := r.inline(line)
		args, _, err := resp.NextCommand(append([]byte(nil), line...), nil)
		switch {
		case wantErr != "" || err != nil:
			if err == nil || "-"+err.(*resp.ProtocolError).Reply() != wantErr {
				t.Errorf("%q: Redis said %q, we split %q (%v)", line, wantErr, args, err)
			}
		case len(args) < 3 || !equalArgs(args[3:], want):
			t.Errorf("%q: Redis parsed %q, we split %q", line, want, args)
		}
	}
}

// randLine is an inline line's tail, neither a line end nor a NUL in it
// (Redis looks for a line's end with strchr, which stops at a NUL).
func randLine(rng *rand.Rand) string {
	const alphabet = " \t\v\f\r\"'\\xX0aF9z\"'\\ "
	b := make([]byte, rng.IntN(24))
	for i := range b {
		if rng.IntN(5) > 0 {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		} else if b[i] = byte(1 + rng.IntN(255)); b[i] == '\n' {
			b[i] = 'n'
		}
	}
	return string(b)
}

// redisConn is one connection to the server, dialed again after Redis
// closed it for a protocol error.
type redisConn struct {
	t    *testing.T
	addr string
	c    net.Conn
	rd   *resp.Reader
}

// inline sends line and returns the array Redis answered, or its error
// reply (it then closes the connection).
func (r *redisConn) inline(line []byte) ([][]byte, string) {
	if r.c == nil {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			r.t.Fatal(err)
		}
		r.c, r.rd = c, resp.NewReader(c, 4096)
	}
	r.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.c.Write(line); err != nil {
		r.t.Fatal(err)
	}
	rep, err := r.rd.Next()
	if err != nil {
		r.t.Fatalf("%q: %v", line, err)
	}
	switch rep.Type {
	case resp.Error:
		if _, err := r.rd.Next(); err != io.EOF {
			r.t.Fatalf("%q: Redis kept the connection after %q (%v)", line, rep.Str, err)
		}
		r.close()
		return nil, "-" + string(rep.Str)
	case resp.Array:
		args := make([][]byte, len(rep.Elems))
		for i, e := range rep.Elems {
			args[i] = e.Str
		}
		return args, ""
	}
	r.t.Fatalf("%q: Redis answered %v", line, rep)
	return nil, ""
}

func (r *redisConn) close() {
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}

func equalArgs(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
