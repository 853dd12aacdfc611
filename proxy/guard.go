package proxy

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/tidwall/redcon"
)

// ProtocolError is a client stream lockproxy will not parse: malformed
// RESP, or a command past the limits. The client gets
// "-ERR Protocol error: <Msg>" and its connection is closed.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

// inlineMax bounds an inline (telnet-style) command line, as Redis does.
const inlineMax = 64 << 10

// respGuard validates the client's byte stream incrementally, with the
// grammar redcon's reader accepts, and hands it on only up to the end of
// the last complete command. redcon re-parses a half-received command on
// every read and trusts declared lengths: a huge bulk length overflows its
// index arithmetic (a panic that kills the process), a huge argument count
// makes it spin, and a command trickled in byte by byte costs it quadratic
// time. Behind the guard it only ever sees whole commands within limits,
// and each is parsed once.
type respGuard struct {
	maxBulk, maxArgs, maxCmd int64

	buf     []byte
	r       int   // buf[r:ok] is validated and not yet handed out
	ok      int   // end of the last complete command
	end     int   // end of the bytes read
	scan    int   // buf[ok:scan] is validated, part of the current command
	st      uint8 // parser state at scan
	num     int64 // the number being read (count or length)
	digits  int
	args    int64 // arguments left in the current command
	bulk    int64 // bytes left in the current argument
	err     error // the stream broke at ok: reported once buf[r:ok] is out
	readErr error // from the connection, reported once buf[r:ok] is out
}

// Parser states.
const (
	stStart   uint8 = iota // at a command boundary
	stInline               // inside an inline command line
	stCount                // digits of *<count>
	stCountLF              // '\n' after the count
	stDollar               // '$' of the next argument
	stLen                  // digits of $<length>
	stLenLF                // '\n' after the length
	stData                 // argument bytes
	stDataCR               // '\r' after the argument
	stDataLF               // '\n' after the argument
)

const guardChunk = 4096

func (g *respGuard) init(cfg Config) {
	g.maxBulk, g.maxArgs, g.maxCmd = int64(cfg.MaxBulkLen), int64(cfg.MaxArgs), int64(cfg.MaxQueryBuffer)
}

// read fills p with validated bytes, reading from rd as needed.
func (g *respGuard) read(rd io.Reader, p []byte) (int, error) {
	for {
		if g.r < g.ok {
			n := copy(p, g.buf[g.r:g.ok])
			g.r += n
			return n, nil
		}
		if g.err != nil {
			return 0, g.err
		}
		if g.readErr != nil {
			return 0, g.readErr
		}
		g.makeRoom()
		n, err := rd.Read(g.buf[g.end:])
		g.end += n
		g.validate()
		if err != nil {
			g.readErr = err
		}
	}
}

// makeRoom drops what was handed out and makes space to read into.
func (g *respGuard) makeRoom() {
	if g.buf == nil {
		g.buf = make([]byte, guardChunk)
	}
	if g.r > 0 {
		n := copy(g.buf, g.buf[g.r:g.end])
		g.ok -= g.r
		g.scan -= g.r
		g.end = n
		g.r = 0
	}
	switch {
	case g.end == 0 && len(g.buf) > 64<<10:
		g.buf = make([]byte, guardChunk) // don't keep a big command's buffer
	case g.end == len(g.buf):
		// Only a command longer than the buffer fills it; validate has
		// bounded it by maxCmd, so this doubles a bounded number of times.
		nb := make([]byte, 2*len(g.buf))
		copy(nb, g.buf[:g.end])
		g.buf = nb
	}
}

// validate advances the parser over buf[scan:end].
func (g *respGuard) validate() {
	b := g.buf[:g.end]
	i := g.scan
	for g.err == nil && i < len(b) {
		c := b[i]
		switch g.st {
		case stStart:
			if c == '*' {
				g.st, g.num, g.digits = stCount, 0, 0
				i++
				continue
			}
			g.st = stInline
			continue // the byte is part of the line
		case stInline:
			nl := bytes.IndexByte(b[i:], '\n')
			if nl < 0 {
				i = len(b)
			} else {
				i += nl
			}
			if i-g.ok > inlineMax {
				g.fail("too big inline request (more than 64 KiB without a newline)")
				continue
			}
			if nl >= 0 {
				i++
				g.complete(i)
			}
			continue
		case stCount, stLen:
			limit, what := g.maxArgs, "multibulk"
			if g.st == stLen {
				limit, what = g.maxBulk, "bulk"
			}
			switch {
			case '0' <= c && c <= '9':
				g.num = g.num*10 + int64(c-'0')
				g.digits++
				if g.num > limit {
					g.fail(fmt.Sprintf("invalid %s length: over %d (%s in config.toml)", what, limit, map[string]string{"bulk": "proto_max_bulk_len", "multibulk": "proto_max_args"}[what]))
					continue
				}
			case c == '\r' && g.digits > 0 && (g.num > 0 || g.st == stLen):
				g.st++ // stCountLF or stLenLF
			default:
				g.fail("invalid " + what + " length")
				continue
			}
		case stCountLF, stLenLF:
			if c != '\n' {
				g.fail("invalid " + map[bool]string{true: "multibulk", false: "bulk"}[g.st == stCountLF] + " length")
				continue
			}
			if g.st == stCountLF {
				g.args, g.st = g.num, stDollar
				break
			}
			g.bulk, g.st = g.num, stData
			if int64(i+1-g.ok)+g.bulk+2 > g.maxCmd {
				g.fail(fmt.Sprintf("command larger than %d bytes (client_query_buffer_limit in config.toml)", g.maxCmd))
				continue
			}
		case stDollar:
			if c != '$' {
				g.fail(fmt.Sprintf("expected '$', got %q", c))
				continue
			}
			g.st, g.num, g.digits = stLen, 0, 0
		case stData:
			k := min(g.bulk, int64(len(b)-i))
			g.bulk -= k
			i += int(k)
			if g.bulk == 0 {
				g.st = stDataCR
			}
			continue
		case stDataCR, stDataLF:
			want := byte('\r')
			if g.st == stDataLF {
				want = '\n'
			}
			if c != want {
				g.fail("expected CRLF after a bulk argument (wrong length?)")
				continue
			}
			if g.st == stDataCR {
				g.st = stDataLF
				break
			}
			g.args--
			if g.args == 0 {
				g.complete(i + 1)
			} else {
				g.st = stDollar
			}
		}
		i++
	}
	if g.err == nil {
		g.scan = i
	}
}

func (g *respGuard) complete(end int) {
	g.ok, g.scan, g.st = end, end, stStart
}

// fail breaks the stream at the current command: the commands before it
// are still handed out, then the error.
func (g *respGuard) fail(msg string) {
	g.err = &ProtocolError{Msg: msg}
	g.end = g.ok
	g.scan = g.ok
}

// The event loop's side of the guard (loopclient.go): it reads into the
// guard's buffer itself and takes the complete commands as one slice.

// fillFrom reads once from the non-blocking fd into the buffer and
// validates what arrived. n == 0 with a nil error is the end of the stream.
func (g *respGuard) fillFrom(fd int) (int, error) {
	g.makeRoom()
	n, err := evloop.Read(fd, g.buf[g.end:])
	if n > 0 {
		g.end += n
		g.validate()
	}
	return n, err
}

// take hands out every complete, validated command not yet handed out. The
// slice is valid until the next fillFrom.
func (g *respGuard) take() []byte {
	b := g.buf[g.r:g.ok]
	g.r = g.ok
	return b
}

// broken is the protocol error that ends the stream once every command
// before it was handed out, nil while there is none or some are left.
func (g *respGuard) broken() error {
	if g.r < g.ok {
		return nil
	}
	return g.err
}

// unread is the number of bytes read but not yet handed out.
func (g *respGuard) unread() int { return g.end - g.r }

// nextCommand splits the first command of b, which the guard validated,
// into args (reusing its memory) and returns the rest of b. Inline commands
// (telnet style) are parsed by redcon, as on redcon's own connections; a
// blank line is no command (nil args). err is a protocol error.
func nextCommand(b []byte, args [][]byte) ([][]byte, []byte, error) {
	args = args[:0]
	if b[0] != '*' {
		nl := bytes.IndexByte(b, '\n')
		line, rest := b[:nl+1], b[nl+1:]
		cmd, err := redcon.Parse(line)
		if err != nil {
			if msg := err.Error(); strings.HasPrefix(msg, "Protocol error: ") {
				return nil, rest, &ProtocolError{Msg: strings.TrimPrefix(msg, "Protocol error: ")}
			}
			return nil, rest, nil // a blank line
		}
		return append(args, cmd.Args...), rest, nil
	}
	i := 1
	n := 0
	for ; b[i] != '\r'; i++ {
		n = n*10 + int(b[i]-'0')
	}
	i += 2
	for ; n > 0; n-- {
		l := 0
		for i++; b[i] != '\r'; i++ { // skip '$'
			l = l*10 + int(b[i]-'0')
		}
		i += 2
		args = append(args, b[i:i+l:i+l])
		i += l + 2
	}
	return args, b[i:], nil
}
