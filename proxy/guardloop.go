package proxy

import (
	"bytes"
	"strings"
	"syscall"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/tidwall/redcon"
)

// The event loop's side of the guard (loopclient.go): it reads into the
// guard's buffer itself and takes the complete commands as one slice.

// fillFrom reads once from the non-blocking fd into the buffer and
// validates what arrived. n == 0 with a nil error is the end of the stream.
func (g *respGuard) fillFrom(fd int) (int, error) {
	if g.err != nil || !g.makeRoom() {
		return 0, syscall.EAGAIN // nothing more is read: the stream ends at g.err
	}
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
	g.resume()
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
