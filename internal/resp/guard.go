package resp

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"
)

// inlineMax bounds an inline (telnet-style) command line, as Redis does.
const inlineMax = 64 << 10

// Before AUTH succeeds (Guard.Authed), a command may have at most
// preauthMaxArgs arguments of at most preauthMaxBulk bytes: Redis's limits
// for unauthenticated clients, so that a stranger cannot make lockproxy
// hold megabytes per connection.
const (
	preauthMaxArgs = 10
	preauthMaxBulk = 16384
)

// Limits bound what one client may send.
type Limits struct {
	MaxBulk    int64 // one argument's length (proto_max_bulk_len)
	MaxArgs    int64 // arguments of one command, its name included (proto_max_args)
	MaxCommand int64 // one command as sent, framing included (client_query_buffer_limit)
	// ReadAhead is what the connection may have read past the command
	// being validated (it stops reading there while replies are pending):
	// the buffer holds at most MaxCommand + ReadAhead and a read's chunk.
	ReadAhead int
}

// Guard validates a client's byte stream incrementally and hands it on
// only up to the end of the last complete command, within its Limits.
// Whoever parses behind it (NextCommand, or redcon's reader on TLS
// connections) only ever sees whole, well-formed commands within limits,
// each validated once however the bytes arrive. redcon's reader on its own
// re-parses a half-received command on every read and trusts declared
// lengths: a huge bulk length overflows its index arithmetic (a panic that
// kills the process), a huge argument count makes it spin, and a command
// trickled in byte by byte costs it quadratic time.
//
// Set the exported fields before the first read. Two ways to drive it: Read
// (a blocking connection: the Guard reads into its buffer and copies out),
// or Fill, Take and Broken (an event loop: complete commands are handed
// out as one slice of the buffer, without copying).
type Guard struct {
	Limits

	// Authed, when set, is the connection's authentication state. Until
	// it is true, the pre-auth limits apply, and each command is validated
	// only once the one before it was handed out (and so handled: the
	// connection runs what it takes at once), under the state that one
	// left: AUTH followed by a long command in one write is served.
	Authed *bool

	// Budget bounds the memory of all connections' input; nil: unbounded
	// (tests of the guard alone).
	Budget *Budget
	// Interrupt wakes the connection's owner once the Budget chose to
	// evict it (Evicting); called from another connection's goroutine, it
	// must not block.
	Interrupt func()

	held     atomic.Int64 // bytes charged to Budget; read by other connections' evictions
	evicting atomic.Bool  // the Budget closes this connection
	released bool         // Budget.mu: the connection is closed, its memory given back
	kept     int64        // Budget.mu: the part of held charged with Keep

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

// Held is the memory the connection holds, as charged to its Budget.
func (g *Guard) Held() int64 { return g.held.Load() }

// Evicting reports whether the Budget chose to close the connection.
func (g *Guard) Evicting() bool { return g.evicting.Load() }

// preauth reports whether the pre-auth limits apply.
func (g *Guard) preauth() bool { return g.Authed != nil && !*g.Authed }

// maxBuf bounds the buffer: one command of MaxCommand bytes behind what a
// client may have sent ahead.
func (g *Guard) maxBuf() int { return int(g.MaxCommand) + g.ReadAhead + guardChunk }

// resume validates what was left unvalidated at a command boundary (the
// pre-auth rule), once everything before it was handed out. It reports
// whether that made progress.
func (g *Guard) resume() bool {
	if g.r < g.ok || g.scan == g.end || g.err != nil {
		return false
	}
	ok := g.ok
	g.validate()
	return g.ok > ok || g.err != nil
}

// Read fills p with validated bytes, reading from rd as needed: a blocking
// connection's Read. It returns the stream's *ProtocolError once the
// commands before it were read, and rd's error once everything validated
// was.
func (g *Guard) Read(rd io.Reader, p []byte) (int, error) {
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
				g.failWith(g.Budget.Error(g.held.Load()))
				continue
			}
			g.readErr = err
		}
	}
}

// makeRoom drops what was handed out and makes space to read into,
// within the budget; false when the budget refused it (g.err is set).
func (g *Guard) makeRoom() bool {
	if g.buf == nil {
		if !g.Budget.charge(g, guardChunk) {
			g.failWith(g.Budget.Error(g.held.Load()))
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
		g.Budget.charge(g, int64(guardChunk-len(g.buf)))
		g.buf = make([]byte, guardChunk) // don't keep a big command's buffer
	case g.end == len(g.buf):
		// Only a command longer than the buffer fills it; validate has
		// bounded it by MaxCommand, so this doubles a bounded number of
		// times, up to maxBuf, which holds the longest command with what
		// may have been read ahead of it.
		n := min(2*len(g.buf), max(g.maxBuf(), len(g.buf)+guardChunk))
		if !g.Budget.charge(g, int64(n-len(g.buf))) {
			g.failWith(g.Budget.Error(g.held.Load()))
			return false
		}
		nb := make([]byte, n)
		copy(nb, g.buf[:g.end])
		g.buf = nb
	}
	return true
}

// validate advances the parser over buf[scan:end].
func (g *Guard) validate() {
	b := g.buf[:g.end]
	i := g.scan
	for g.err == nil && i < len(b) {
		switch g.st {
		case stStart:
			if g.ok > g.r && g.preauth() {
				// Not authenticated: the next command is checked under
				// the state the ones before it leave (resume).
				g.scan = i
				return
			}
			if b[i] == '*' {
				if end := g.whole(b, i); end > 0 {
					g.complete(end)
					i = end
					continue
				}
				g.st, g.num, g.digits = stCount, 0, 0
				i++
			} else {
				g.st = stInline // the byte is part of the line
			}
		case stInline:
			i = g.inline(b, i)
		default:
			i = g.framing(b, i)
		}
	}
	if g.err == nil {
		g.scan = i
	}
}

// whole returns the end of the multibulk command at b[i] (a '*') when it
// is all in b, well-formed and within the limits, and 0 otherwise: then
// framing goes over it byte by byte, keeping its state across reads, and
// says what is wrong or waits for the rest. Almost every command arrives
// whole, and this keeps the state in registers. It accepts exactly what
// framing accepts (FuzzCommandStream compares a stream read whole with the
// same stream in small pieces), and is not used before AUTH, whose limits
// framing applies.
func (g *Guard) whole(b []byte, i int) int {
	if g.preauth() {
		return 0
	}
	n, i, ok := digitsCRLF(b, i+1, g.MaxArgs)
	if !ok || n == 0 {
		return 0
	}
	for ; n > 0; n-- {
		if i >= len(b) || b[i] != '$' {
			return 0
		}
		l, j, ok := digitsCRLF(b, i+1, g.MaxBulk)
		if !ok || l > g.MaxCommand-int64(j-g.ok)-2 { // no sum that could wrap
			return 0
		}
		end := j + int(l)
		if end+2 > len(b) || b[end] != '\r' || b[end+1] != '\n' {
			return 0
		}
		i = end + 2
	}
	return i
}

// digitsCRLF reads the decimal number at b[i:], at least one digit and at
// most max, up to its CRLF; next is past the CRLF. ok is false for
// anything else, including a number not yet all read.
func digitsCRLF(b []byte, i int, max int64) (n int64, next int, ok bool) {
	start := i
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		if overTen(n, int64(b[i]-'0'), max) {
			return 0, 0, false
		}
		n = n*10 + int64(b[i]-'0')
	}
	if i == start || i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, 0, false
	}
	return n, i + 2, true
}

// inline advances over an inline command line from b[i] and returns where
// it stopped: after its '\n', or at the end of b.
func (g *Guard) inline(b []byte, i int) int {
	nl := bytes.IndexByte(b[i:], '\n')
	if nl < 0 {
		i = len(b)
	} else {
		i += nl
	}
	if i-g.ok > inlineMax {
		g.fail("too big inline request (more than 64 KiB without a newline)")
		return i
	}
	if nl >= 0 {
		i++
		g.complete(i)
	}
	return i
}

// framing advances over a multibulk command from b[i]: up to its end, the
// end of b, or an error. It returns where it stopped. This is the hot loop
// of every client's input: one call per command.
func (g *Guard) framing(b []byte, i int) int {
	for ; i < len(b); i++ {
		c := b[i]
		switch g.st {
		case stCount, stLen:
			if '0' <= c && c <= '9' {
				if overTen(g.num, int64(c-'0'), g.limit()) {
					g.overLimit()
					return i
				}
				g.num = g.num*10 + int64(c-'0')
				g.digits++
				continue
			}
			if c != '\r' || g.digits == 0 || (g.num == 0 && g.st == stCount) || g.overPreauth() {
				g.numberError(c)
				return i
			}
			g.st++ // stCountLF or stLenLF
		case stCountLF:
			if c != '\n' {
				g.fail("invalid multibulk length")
				return i
			}
			g.args, g.st = g.num, stDollar
		case stLenLF:
			if c != '\n' {
				g.fail("invalid bulk length")
				return i
			}
			g.bulk, g.st = g.num, stData
			if g.bulk > g.MaxCommand-int64(i+1-g.ok)-2 { // no sum that could wrap
				g.fail(fmt.Sprintf("command larger than %d bytes (client_query_buffer_limit in config.toml)", g.MaxCommand))
				return i
			}
		case stData:
			k := min(g.bulk, int64(len(b)-i))
			g.bulk -= k
			i += int(k) - 1 // the loop's i++ moves past; k == 0: this byte again, as stDataCR
			if g.bulk == 0 {
				g.st = stDataCR
			}
		case stDollar:
			if c != '$' {
				g.fail(fmt.Sprintf("expected '$', got %q", c))
				return i
			}
			g.st, g.num, g.digits = stLen, 0, 0
		case stDataCR:
			if c != '\r' {
				g.fail("expected CRLF after a bulk argument (wrong length?)")
				return i
			}
			g.st = stDataLF
		case stDataLF:
			if c != '\n' {
				g.fail("expected CRLF after a bulk argument (wrong length?)")
				return i
			}
			if g.args--; g.args == 0 {
				g.complete(i + 1)
				return i + 1
			}
			g.st = stDollar
		}
	}
	return i
}

// limit bounds the number being read: a count or a length.
func (g *Guard) limit() int64 {
	if g.st == stLen {
		return g.MaxBulk
	}
	return g.MaxArgs
}

// overPreauth reports whether the number just read is over the pre-auth
// limit while it applies.
func (g *Guard) overPreauth() bool {
	pre := int64(preauthMaxArgs)
	if g.st == stLen {
		pre = preauthMaxBulk
	}
	return g.num > pre && g.preauth()
}

// overTen reports whether n*10 + d is over max, without computing it (it
// could wrap when max is near the int64 limit).
func overTen(n, d, max int64) bool { return max < d || n > (max-d)/10 }

// overLimit fails the stream at a count or a length over its limit.
func (g *Guard) overLimit() {
	what, key := "multibulk", "proto_max_args"
	if g.st == stLen {
		what, key = "bulk", "proto_max_bulk_len"
	}
	g.fail(fmt.Sprintf("invalid %s length: over %d (%s in config.toml)", what, g.limit(), key))
}

// numberError fails the stream at byte c of a count or a length that is
// not a number ended by CRLF, or over the pre-auth limit.
func (g *Guard) numberError(c byte) {
	what, pre := "multibulk", preauthMaxArgs
	if g.st == stLen {
		what, pre = "bulk", preauthMaxBulk
	}
	switch {
	case c == '\r' && g.digits > 0 && (g.num > 0 || g.st == stLen):
		// Over the pre-auth limit: Redis's text, and what to do about it.
		g.fail(fmt.Sprintf("unauthenticated %s length (over %d before AUTH, as Redis; requirepass is set: authenticate first)", what, pre))
	default:
		g.fail("invalid " + what + " length")
	}
}

func (g *Guard) complete(end int) {
	g.ok, g.scan, g.st = end, end, stStart
}

// fail breaks the stream at the current command: the commands before it
// are still handed out, then the error.
func (g *Guard) fail(msg string) { g.failWith(&ProtocolError{Msg: msg}) }

func (g *Guard) failWith(err *ProtocolError) {
	g.err = err
	g.end = g.ok
	g.scan = g.ok
}
