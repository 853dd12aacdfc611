package proxy

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"
)

// ProtocolError is a client stream lockproxy will not parse: malformed
// RESP, or a command past the limits. The client gets Reply (for most,
// "-ERR Protocol error: <Msg>") and its connection is closed.
type ProtocolError struct {
	Msg    string
	budget bool // closed for client_query_buffer_total, not for what it sent: "-ERR <Msg>"
}

func (e *ProtocolError) Error() string { return e.Reply() }

// Reply is the error line the client gets, without its '-'.
func (e *ProtocolError) Reply() string {
	if e.budget {
		return "ERR " + e.Msg
	}
	return "ERR Protocol error: " + e.Msg
}

// inlineMax bounds an inline (telnet-style) command line, as Redis does.
const inlineMax = 64 << 10

// Before AUTH succeeds (requirepass set), a command may have at most
// preauthMaxArgs arguments of at most preauthMaxBulk bytes: Redis's limits
// for unauthenticated clients, so that a stranger cannot make lockproxy
// hold megabytes per connection.
const (
	preauthMaxArgs = 10
	preauthMaxBulk = 16384
)

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

	// authed, when set, is the connection's authentication state. Until
	// it is true, the pre-auth limits apply, and each command is validated
	// only once the one before it was handed out (and so handled: redcon
	// reads again only after running what it has, the loop runs what it
	// takes at once), under the state that one left: AUTH followed by a
	// long command in one write is served.
	authed *bool

	// budget bounds the memory of all connections' input (inputBudget);
	// nil: unbounded (tests of the guard alone). mirror: redcon's reader
	// keeps its own copy of what was handed out (the TLS path), charged as
	// twice the largest command (its buffer doubles) in mirrored.
	budget    *inputBudget
	mirror    bool
	mirrored  int64
	held      atomic.Int64 // bytes charged to budget; read by other connections' evictions
	evicting  atomic.Bool  // the budget closes this connection
	interrupt func()       // wakes the connection's owner once evicting is set; never blocks
	released  bool         // budget.mu: the connection is closed, its memory given back

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

// preauth reports whether the pre-auth limits apply.
func (g *respGuard) preauth() bool { return g.authed != nil && !*g.authed }

// maxBuf bounds the buffer: one command of maxCmd bytes behind what a
// client may have sent ahead (the loop stops reading at pauseAt unread).
func (g *respGuard) maxBuf() int { return int(g.maxCmd) + pauseAt + guardChunk }

// resume validates what was left unvalidated at a command boundary (the
// pre-auth rule), once everything before it was handed out. It reports
// whether that made progress.
func (g *respGuard) resume() bool {
	if g.r < g.ok || g.scan == g.end || g.err != nil {
		return false
	}
	ok := g.ok
	g.validate()
	return g.ok > ok || g.err != nil
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
		if g.resume() {
			continue
		}
		if g.readErr != nil {
			return 0, g.readErr
		}
		if !g.makeRoom() {
			continue
		}
		n, err := rd.Read(g.buf[g.end:])
		g.end += n
		g.validate()
		if err != nil {
			if g.evicting.Load() {
				g.failWith(g.budget.budgetError(g.held.Load()))
				continue
			}
			g.readErr = err
		}
	}
}

// makeRoom drops what was handed out and makes space to read into,
// within the budget; false when the budget refused it (g.err is set).
func (g *respGuard) makeRoom() bool {
	if g.buf == nil {
		if !g.budget.charge(g, guardChunk) {
			g.failWith(g.budget.budgetError(g.held.Load()))
			return false
		}
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
		g.budget.charge(g, int64(guardChunk-len(g.buf)))
		g.buf = make([]byte, guardChunk) // don't keep a big command's buffer
	case g.end == len(g.buf):
		// Only a command longer than the buffer fills it; validate has
		// bounded it by maxCmd, so this doubles a bounded number of times,
		// up to maxBuf, which holds the longest command with what may
		// have been read ahead of it.
		n := min(2*len(g.buf), max(g.maxBuf(), len(g.buf)+guardChunk))
		if !g.budget.charge(g, int64(n-len(g.buf))) {
			g.failWith(g.budget.budgetError(g.held.Load()))
			return false
		}
		nb := make([]byte, n)
		copy(nb, g.buf[:g.end])
		g.buf = nb
	}
	return true
}

// validate advances the parser over buf[scan:end].
func (g *respGuard) validate() {
	b := g.buf[:g.end]
	i := g.scan
	for g.err == nil && i < len(b) {
		c := b[i]
		switch g.st {
		case stStart:
			if g.ok > g.r && g.preauth() {
				// Not authenticated: the next command is checked under
				// the state the ones before it leave (resume).
				g.scan = i
				return
			}
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
			limit, pre, what := g.maxArgs, int64(preauthMaxArgs), "multibulk"
			if g.st == stLen {
				limit, pre, what = g.maxBulk, preauthMaxBulk, "bulk"
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
				if g.num > pre && g.preauth() {
					// Redis's text, and what to do about it.
					g.fail(fmt.Sprintf("unauthenticated %s length (over %d before AUTH, as Redis; requirepass is set: authenticate first)", what, pre))
					continue
				}
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
	// redcon's buffer starts at 4 KiB and doubles while a command does not
	// fit: a longer command leaves it up to twice as long, kept.
	if size := int64(end - g.ok); g.mirror && size > guardChunk && 2*size > g.mirrored {
		m := 2 * size
		if !g.budget.charge(g, m-g.mirrored) {
			g.failWith(g.budget.budgetError(g.held.Load()))
			return
		}
		g.mirrored = m
	}
	g.ok, g.scan, g.st = end, end, stStart
}

// fail breaks the stream at the current command: the commands before it
// are still handed out, then the error.
func (g *respGuard) fail(msg string) { g.failWith(&ProtocolError{Msg: msg}) }

func (g *respGuard) failWith(err *ProtocolError) {
	g.err = err
	g.end = g.ok
	g.scan = g.ok
}
