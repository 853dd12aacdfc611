package resp

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Randomized round trips (STYLE.md 11): what the encoders write, the
// parsers read back as it was; commands survive the Guard and NextCommand
// however their bytes arrive; inline commands quoted as Redis quotes them
// split back into their arguments.

func newRand(t testing.TB) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 1))
}

// randBytes is n random bytes, often from a small alphabet that makes
// protocol characters likely.
func randBytes(rng *rand.Rand, n int) []byte {
	const tricky = "\r\n\x00 \t\"'\\x$*+-:_%~>=#,(!0aZ"
	b := make([]byte, n)
	for i := range b {
		if rng.IntN(2) == 0 {
			b[i] = tricky[rng.IntN(len(tricky))]
		} else {
			b[i] = byte(rng.UintN(256))
		}
	}
	return b
}

// randText is a line of text without CR or LF.
func randText(rng *rand.Rand) []byte {
	b := randBytes(rng, rng.IntN(12))
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return b
}

// randReply is a random reply; RESP3 types only with resp3.
func randReply(rng *rand.Rand, depth int, resp3 bool) Reply {
	kinds := 6
	if resp3 {
		kinds = 13
	}
	if depth >= 3 {
		kinds = 4 // no more aggregates
	}
	switch rng.IntN(kinds) {
	case 0:
		return Reply{Type: Status, Str: randText(rng)}
	case 1:
		return Reply{Type: Integer, Int: int64(rng.Uint64())}
	case 2:
		return Reply{Type: Bulk, Str: randBytes(rng, rng.IntN(20))}
	case 3:
		if rng.IntN(3) == 0 {
			return Reply{Type: Error, Str: randText(rng)}
		}
		return ReplyNil
	case 4, 5:
		return randAggregate(rng, Array, depth, resp3)
	case 6:
		return Reply{Type: Double, Str: strconv.AppendFloat(nil, rng.NormFloat64()*1e6, 'g', -1, 64)}
	case 7:
		return Reply{Type: Boolean, Int: int64(rng.IntN(2))}
	case 8:
		return Reply{Type: BigNumber, Str: strconv.AppendInt([]byte("-1234567890123456789"), rng.Int64(), 10)}
	case 9:
		return Reply{Type: Verbatim, Str: randBytes(rng, rng.IntN(20))}
	case 10:
		return randAggregate(rng, Map, depth, resp3)
	case 11:
		return randAggregate(rng, Set, depth, resp3)
	default:
		return randAggregate(rng, Push, depth, resp3)
	}
}

func randAggregate(rng *rand.Rand, t byte, depth int, resp3 bool) Reply {
	n := rng.IntN(4)
	if t == Map {
		n *= 2
	}
	r := Reply{Type: t, Elems: make([]Reply, n)}
	for i := range r.Elems {
		r.Elems[i] = randReply(rng, depth+1, resp3)
	}
	return r
}

// downgrade is what a RESP2 client gets in place of r (AppendReply).
func downgrade(r Reply) Reply {
	switch r.Type {
	case Boolean:
		return Reply{Type: Integer, Int: r.Int}
	case Double, BigNumber, Verbatim:
		return Reply{Type: Bulk, Str: r.Str}
	case Map, Set, Push, Array:
		d := Reply{Type: Array, Elems: make([]Reply, len(r.Elems))}
		for i, e := range r.Elems {
			d.Elems[i] = downgrade(e)
		}
		return d
	}
	return r
}

func TestRoundTripReplies(t *testing.T) {
	rng := newRand(t)
	for i := 0; i < 5000; i++ {
		r := randReply(rng, 0, true)
		enc3 := AppendReply([]byte("junk"), r, true)[4:]
		got, n, err := Parse3(enc3)
		if err != nil || n != len(enc3) || !got.Equal(r) {
			t.Fatalf("RESP3 %v: encoded %q, parsed %v (%d of %d bytes, %v)", r, enc3, got, n, len(enc3), err)
		}
		enc2 := AppendReply(nil, r, false)
		got, n, err = Parse(enc2)
		if want := downgrade(r); err != nil || n != len(enc2) || !got.Equal(want) {
			t.Fatalf("RESP2 %v: encoded %q, parsed %v (%d of %d bytes, %v), want %v", r, enc2, got, n, len(enc2), err, want)
		}
	}
}

// TestRoundTripCommands: a stream of random commands, cut into random
// pieces, comes out of the Guard and NextCommand as it went in; each
// command also parses as an array of bulk strings.
func TestRoundTripCommands(t *testing.T) {
	rng := newRand(t)
	for round := 0; round < 300; round++ {
		var want [][][]byte
		var stream []byte
		for range 1 + rng.IntN(20) {
			args := make([][]byte, 1+rng.IntN(6))
			for i := range args {
				args[i] = randBytes(rng, rng.IntN(40))
			}
			cmd := AppendCommand(nil, args...)
			r, n, err := Parse(cmd)
			if err != nil || n != len(cmd) || r.Type != Array || len(r.Elems) != len(args) {
				t.Fatalf("%q parsed as %v (%v)", cmd, r, err)
			}
			for i, e := range r.Elems {
				if e.Type != Bulk || !bytes.Equal(e.Str, args[i]) {
					t.Fatalf("%q: argument %d parsed as %v", cmd, i, e)
				}
			}
			want = append(want, args)
			stream = append(stream, cmd...)
		}
		got, err := guardCommands(t, stream, 1+rng.IntN(64))
		if err != nil || !equalCommands(got, want) {
			t.Fatalf("stream %q: got %q (%v), want %q", stream, got, err, want)
		}
	}
}

// TestRoundTripInline: random arguments quoted as Redis's sdscatrepr
// quotes them, one inline command per line, split back as they were.
func TestRoundTripInline(t *testing.T) {
	rng := newRand(t)
	for round := 0; round < 300; round++ {
		var want [][][]byte
		var stream []byte
		for range 1 + rng.IntN(10) {
			args := make([][]byte, 1+rng.IntN(6))
			for i := range args {
				args[i] = randBytes(rng, rng.IntN(20))
				stream = append(stream, " \t"[rng.IntN(2)])
				stream = append(stream, quoteInline(args[i])...)
			}
			stream = append(stream, "\r\n\n"[rng.IntN(2):]...)
			want = append(want, args)
		}
		got, err := guardCommands(t, stream, 1+rng.IntN(64))
		if err != nil || !equalCommands(got, want) {
			t.Fatalf("stream %q: got %q (%v), want %q", stream, got, err, want)
		}
	}
}

// quoteInline quotes s as Redis's sdscatrepr does.
func quoteInline(s []byte) []byte {
	b := []byte{'"'}
	for _, c := range s {
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		case '\a':
			b = append(b, `\a`...)
		case '\b':
			b = append(b, `\b`...)
		default:
			if c < 0x20 || c >= 0x7f {
				b = append(b, `\x`...)
				b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// guardCommands runs stream through a Guard, arriving k bytes at a time,
// and splits what it hands out into commands.
func guardCommands(t testing.TB, stream []byte, k int) ([][][]byte, error) {
	g := Guard{Limits: Limits{MaxBulk: 1 << 20, MaxArgs: 1 << 10, MaxCommand: 4 << 20, ReadAhead: 64 << 10}}
	rd := &chunkReader{data: stream, k: k}
	var cmds [][][]byte
	var args [][]byte
	for {
		n, err := g.Fill(rd)
		for data := g.Take(); len(data) > 0; {
			var perr error
			if args, data, perr = NextCommand(data, args); perr != nil {
				return cmds, perr
			}
			if len(args) > 0 {
				cmds = append(cmds, cloneArgs(args))
			}
		}
		if err := g.Broken(); err != nil {
			return cmds, err
		}
		if n == 0 && err == nil || err != nil {
			return cmds, nil
		}
	}
}

func cloneArgs(args [][]byte) [][]byte {
	c := make([][]byte, len(args))
	for i, a := range args {
		c[i] = append([]byte{}, a...)
	}
	return c
}

func equalCommands(a, b [][][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if !bytes.Equal(a[i][j], b[i][j]) {
				return false
			}
		}
	}
	return true
}

// TestAppendAuth: the default user's AUTH has the password alone, an ACL
// user's has both, no password has none; every byte is kept.
func TestAppendAuth(t *testing.T) {
	odd := "AUTH\r\n*1\r\n\x00\xff"
	for _, c := range []struct{ user, pass, want string }{
		{"", "", "prefix"},
		{"app", "", "prefix"},
		{"", odd, "prefix" + string(AppendCommandString(nil, "AUTH", odd))},
		{"app", odd, "prefix" + string(AppendCommandString(nil, "AUTH", "app", odd))},
	} {
		if got := string(AppendAuth([]byte("prefix"), c.user, c.pass)); got != c.want {
			t.Errorf("AppendAuth(%q, %q) = %q, want %q", c.user, c.pass, got, c.want)
		}
	}
}
