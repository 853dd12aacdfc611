package resp

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

// chunkReader returns data k bytes at a time, then io.EOF.
type chunkReader struct {
	data []byte
	k    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.k)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// guardAll runs data through a Guard's Read, arriving k bytes at a time and
// read into buffers of size p, and returns what it handed on and why it
// stopped.
func guardAll(l Limits, data []byte, k, p int) ([]byte, error) {
	g := Guard{Limits: l}
	rd := &chunkReader{data: data, k: k}
	var out []byte
	buf := make([]byte, p)
	for {
		n, err := g.Read(rd, buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, errors.New("read returned 0, nil")
		}
	}
}

var testLimits = Limits{MaxBulk: 1000, MaxArgs: 16, MaxCommand: 4096, ReadAhead: 64 << 10}

// TestGuardLimits: every broken or oversized command stops the stream
// with its error, after the commands before it, whatever the chunking.
func TestGuardLimits(t *testing.T) {
	ping := "*1\r\n$4\r\nPING\r\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"bulk length over the limit", "*2\r\n$4\r\nECHO\r\n$1001\r\n", "invalid bulk length: over 1000 (proto_max_bulk_len in config.toml)"},
		{"bulk length that overflows int64", "*1\r\n$9223372036854775808\r\n", "invalid bulk length: over 1000 (proto_max_bulk_len in config.toml)"},
		{"bulk length that overflows redcon's index", "*1\r\n$9223372036854775807\r\nx", "invalid bulk length: over 1000 (proto_max_bulk_len in config.toml)"},
		{"argument count over the limit", "*17\r\n", "invalid multibulk length: over 16 (proto_max_args in config.toml)"},
		{"huge argument count", "*4611686018427387904\r\n", "invalid multibulk length: over 16 (proto_max_args in config.toml)"},
		{"negative count", "*-1\r\n", "invalid multibulk length"},
		{"zero count", "*0\r\n", "invalid multibulk length"},
		{"count not a number", "*x\r\n", "invalid multibulk length"},
		{"count without CR", "*1\n$4\r\nPING\r\n", "invalid multibulk length"},
		{"count without LF", "*1\rx", "invalid multibulk length"},
		{"length without LF", "*1\r\n$4\rx", "invalid bulk length"},
		{"empty length", "*1\r\n$\r\n", "invalid bulk length"},
		{"negative bulk length", "*1\r\n$-1\r\n", "invalid bulk length"},
		{"not a bulk", "*1\r\n+PING\r\n", "expected '$', got '+'"},
		{"bulk longer than declared", "*1\r\n$3\r\nPING\r\n", "expected CRLF after a bulk argument (wrong length?)"},
		{"bulk without LF", "*1\r\n$4\r\nPING\rx", "expected CRLF after a bulk argument (wrong length?)"},
		{"command over the query buffer limit", "*5\r\n" + strings.Repeat("$1000\r\n"+strings.Repeat("x", 1000)+"\r\n", 4) + "$1000\r\n", "command larger than 4096 bytes (client_query_buffer_limit in config.toml)"},
		{"inline line over 64 KiB", strings.Repeat("x", 65*1024), "too big inline request (more than 64 KiB without a newline)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []int{1, 7, 1 << 20} {
				out, err := guardAll(testLimits, []byte(ping+tc.in), k, 4096)
				var pe *ProtocolError
				if string(out) != ping || !errors.As(err, &pe) || pe.Msg != tc.want || pe.OverBudget {
					t.Fatalf("arriving %d bytes at a time: handed on %q, then %v; want %q then %q", k, out, err, ping, tc.want)
				}
				if got := pe.Reply(); got != "ERR Protocol error: "+tc.want {
					t.Fatalf("reply %q", got)
				}
			}
		})
	}
}

// TestGuardPreAuth: before AUTH, Redis's limits for strangers apply, to
// each command under the state the one before it left.
func TestGuardPreAuth(t *testing.T) {
	auth := string(AppendCommandString(nil, "AUTH", "pw"))
	long := string(AppendCommandString(nil, "ECHO", strings.Repeat("x", 20000)))
	eleven := string(AppendCommandString(nil, strings.Fields("DEL a b c d e f g h i j")...))
	for _, tc := range []struct {
		name, in, want string
		authOK         bool
	}{
		{"11 arguments", eleven, "unauthenticated multibulk length (over 10 before AUTH, as Redis; requirepass is set: authenticate first)", false},
		{"a 16385-byte argument", "*2\r\n$4\r\nECHO\r\n$16385\r\n", "unauthenticated bulk length (over 16384 before AUTH, as Redis; requirepass is set: authenticate first)", false},
		{"within the limits", string(AppendCommandString(nil, "ECHO", strings.Repeat("x", 16384))), "", false},
		{"a wrong password, then 11 arguments", auth + eleven, "unauthenticated multibulk length (over 10 before AUTH, as Redis; requirepass is set: authenticate first)", false},
		{"AUTH, then 11 arguments and a long one in the same write", auth + eleven + long, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			authed := false
			g := Guard{Limits: Limits{MaxBulk: 1 << 20, MaxArgs: 1 << 10, MaxCommand: 2 << 20}, Authed: &authed}
			rd := &chunkReader{data: []byte(tc.in), k: len(tc.in)}
			var args [][]byte
			var err error
			for err == nil {
				var n int
				n, err = g.Fill(rd)
				for data := g.Take(); len(data) > 0; {
					args, data, _ = NextCommand(data, args)
					if string(args[0]) == "AUTH" && tc.authOK {
						authed = true // handled before the next is validated
					}
				}
				if n == 0 && err == nil {
					err = io.EOF
				}
			}
			got := ""
			if perr := g.Broken(); perr != nil {
				got = perr.(*ProtocolError).Msg
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestGuardBufferBounded: a long command trickled in a byte at a time is
// validated once (linear time) in a buffer that grows to hold it and no
// further, and a big command's buffer is not kept.
func TestGuardBufferBounded(t *testing.T) {
	l := Limits{MaxBulk: 1 << 20, MaxArgs: 8, MaxCommand: 1<<20 + 64, ReadAhead: 64 << 10}
	big := AppendCommandString(nil, "ECHO", strings.Repeat("x", 1<<20))
	g := Guard{Limits: l}
	rd := &chunkReader{data: big, k: 1}
	var got []byte
	for {
		_, err := g.Fill(rd)
		got = append(got, g.Take()...)
		if len(g.buf) > g.maxBuf() {
			t.Fatalf("buffer %d bytes, bound %d", len(g.buf), g.maxBuf())
		}
		if err != nil {
			break
		}
	}
	if string(got) != string(big) {
		t.Fatalf("handed on %d bytes of %d", len(got), len(big))
	}
	g.Fill(&chunkReader{data: []byte("*1\r\n$4\r\nPING\r\n"), k: 100})
	if len(g.buf) > 64<<10 || string(g.Take()) != "*1\r\n$4\r\nPING\r\n" {
		t.Fatalf("after the big command: buffer %d bytes", len(g.buf))
	}
}

// TestGuardStopsReading: past a protocol error nothing more is read.
func TestGuardStopsReading(t *testing.T) {
	g := Guard{Limits: testLimits}
	rd := &chunkReader{data: []byte("*1\r\n$4\r\nPING\r\n*0\r\nmore"), k: 100}
	if _, err := g.Fill(rd); err != nil || !g.Stopped() || g.Broken() != nil {
		t.Fatalf("first fill: %v, stopped %v, broken %v", err, g.Stopped(), g.Broken())
	}
	if n, err := g.Fill(rd); n != 0 || err != ErrStopped {
		t.Fatalf("fill after the error: %d, %v", n, err)
	}
	if g.Take() == nil || g.Broken() == nil || g.Unread() != 0 {
		t.Fatalf("the command before the error, then the error: broken %v, unread %d", g.Broken(), g.Unread())
	}
}

// TestGuardUntake: bytes given back are handed out again, first, with what
// arrived since, and count as unread meanwhile.
func TestGuardUntake(t *testing.T) {
	g := Guard{Limits: testLimits}
	rd := &chunkReader{data: []byte("*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nECHO\r\n"), k: 100}
	if _, err := g.Fill(rd); err != nil {
		t.Fatal(err)
	}
	if b := g.Take(); string(b) != "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nECHO\r\n" {
		t.Fatalf("take: %q", b)
	}
	g.Untake(len("*1\r\n$4\r\nECHO\r\n"))
	if g.Unread() != len("*1\r\n$4\r\nECHO\r\n") {
		t.Fatalf("unread %d after untake", g.Unread())
	}
	rd.data = append(rd.data, "*1\r\n$4\r\nQUIT\r\n"...)
	if _, err := g.Fill(rd); err != nil {
		t.Fatal(err)
	}
	if b := g.Take(); string(b) != "*1\r\n$4\r\nECHO\r\n*1\r\n$4\r\nQUIT\r\n" {
		t.Fatalf("take after untake: %q", b)
	}
}

// TestGuardWholeSameAsPieces: a command that arrives whole (checked at
// once by Guard.whole) is handed on or refused exactly as when it arrives
// a byte at a time (the framing state machine), at each limit and one
// past it, and for every malformation whole must leave to framing.
func TestGuardWholeSameAsPieces(t *testing.T) {
	l := Limits{MaxBulk: 10, MaxArgs: 3, MaxCommand: 40, ReadAhead: 1024}
	cmd := func(args ...string) string {
		s := fmt.Sprintf("*%d\r\n", len(args))
		for _, a := range args {
			s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		return s
	}
	ping := cmd("PING")
	same := func(l Limits, data string) {
		t.Helper()
		whole, errWhole := guardAll(l, []byte(data), len(data)+1, 4096)
		bytewise, errBytes := guardAll(l, []byte(data), 1, 1)
		if string(whole) != string(bytewise) || fmt.Sprint(errWhole) != fmt.Sprint(errBytes) {
			t.Errorf("%q: whole %q (%v), a byte at a time %q (%v)", data, whole, errWhole, bytewise, errBytes)
		}
	}
	// Limits at the int64 limit (a configuration may ask for them): no
	// length or size sum may wrap, in either path. Before overTen and the
	// subtraction, whole indexed b at a wrapped, negative end (a panic),
	// and the digits of a length past 2^64 wrapped to a small one.
	huge := Limits{MaxBulk: math.MaxInt64, MaxArgs: math.MaxInt64, MaxCommand: math.MaxInt64, ReadAhead: 1024}
	for _, in := range []string{
		"*1\r\n$9223372036854775807\r\nx", "*1\r\n$9223372036854775780\r\nx", "*1\r\n$00009223372036854775790\r\nx",
		"*1\r\n$18446744073709551617\r\nx\r\n", "*18446744073709551617\r\n$1\r\nx\r\n", "*1\r\n$9223372036854775808\r\n",
		cmd("SET", "k", "v"),
	} {
		same(huge, in)
		same(Limits{MaxBulk: math.MaxInt64 / 10, MaxArgs: 3, MaxCommand: math.MaxInt64 - 1, ReadAhead: 1024}, in)
	}
	if got, err := guardAll(huge, []byte("*1\r\n$18446744073709551617\r\nx\r\n"), 64, 64); len(got) != 0 ||
		!strings.Contains(fmt.Sprint(err), "invalid bulk length: over 9223372036854775807") {
		t.Errorf("a length past 2^64 under a limit of 2^63-1: handed on %q, %v", got, err)
	}
	for _, in := range []string{
		cmd("GET", "k"), cmd("SET", "k", "v"), cmd("SET", "k", "0123456789"), cmd("SET", "k", "0123456789a"),
		cmd("A", "B", "C"), cmd("A", "B", "C", "D"), cmd("SET", "", ""),
		cmd("SET", "0123456789", "0123456"), cmd("SET", "0123456789", "01234567"), // 40 and 41 bytes
		"*003\r\n$03\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", "*0\r\n", "*-1\r\n", "*\r\n", "*1\n$4\r\nPING\r\n",
		"*1\r\n$4\r\nPINGx\r\n", "*1\r\n$4\r\nPING\rx", "*1\r\n$4\r\nPING\n\r", "*1\r\n+PING\r\n", "*1\r\n$\r\n\r\n",
		"*1\r\n$4x\r\nPING\r\n", "*2\r\n$4\r\nPING\r\n", "*1\r\n$99999999999999999999\r\n", "*99999999999999999999\r\n",
	} {
		for _, data := range []string{in, ping + in + ping} {
			same(l, data)
		}
	}
}
