package catalog

import (
	"fmt"
	"strconv"
)

// Normalization of Lua script text, so that a catalogued script reformatted
// by another library version still matches while a script that means
// something else does not.
//
// Redis runs Lua 5.1, so the tokenizer follows Lua 5.1's llex.c exactly
// (string escapes, long brackets, numerals, comments); where 5.1 and later
// Lua differ (e.g. "\x41" is "x41" in 5.1, "A" in 5.2+), 5.1 wins, because a
// normal form must never equate two scripts that Redis runs differently.
//
// The normal form is the token stream joined by single spaces, with:
//   - comments and whitespace dropped (CR, LF, tabs: all the same);
//   - every string literal ('…', "…", [[…]], [==[…]==]) rewritten as one
//     canonical double-quoted literal of the same bytes (escapes decoded,
//     then re-encoded one way);
//   - redis.pcall written redis.call (they differ only in how a Redis error
//     inside the script is surfaced; lock scripts do not rely on it);
//   - the first argument of redis.call lowercased when it is a string
//     literal by itself (Redis looks commands up case-insensitively); every
//     other literal keeps its case;
//   - ';' separators dropped, except the one place where Lua 5.1 needs
//     them: before '(' that follows something callable. There
//     "a = f;(g)()" and "a = f(g)()" differ, so the ';' is kept, and a line
//     break in that place (which Lua 5.1 refuses to read as a call) is
//     written as ';' too, since a space-joined form has no lines.
//
// Numerals and names are kept verbatim (0x10 and 16 stay different: a
// missed match is an error reply, a false match would be a wrong vote).
// A Redis 7 shebang line ("#!lua flags=…") is kept as the first line of the
// normal form, as its flags change what the script may do.
//
// Known limit, on the safe side: the normalizer is not a parser, so a few
// texts Lua 5.1 rejects (";;", a call split across lines) share the normal
// form of the valid text they resemble. Recognizing such a text runs the
// catalogued, valid script instead of failing on every master; no text is
// ever taken for a script that means something else.

// Normalize returns the normal form of a Lua script body, or "" when the
// body is not a sequence of Lua 5.1 tokens (an unfinished string or long
// comment, a stray character): such a body matches nothing.
func Normalize(body []byte) string {
	out, err := appendNormal(nil, body)
	if err != nil {
		return ""
	}
	return string(out)
}

// lexError is where and why a body is not Lua tokens.
type lexError struct {
	line int
	msg  string
}

func (e *lexError) Error() string { return "line " + strconv.Itoa(e.line) + ": " + e.msg }

// tag is what the normalizer remembers of an emitted token to recognize
// redis.call( "CMD" and redis.pcall.
type tag uint8

const (
	tagOther     tag = iota
	tagRedis         // the global name redis (not a field: not after '.' or ':')
	tagDot           // .
	tagColon         // :
	tagCall          // call or pcall right after redis .
	tagCallParen     // ( right after redis.call
)

// normalizer writes the normal form of src to dst in one pass. It is a
// plain value on the caller's stack: Match normalizes without allocating.
type normalizer struct {
	src  []byte
	i    int
	line int
	dst  []byte
	base int // len(dst) at the start: separators go between tokens only

	prev, prev2 tag
	callable    bool // the last token may end a callable expression: a name, ')', ']', '}' or a string
	semi        bool // a ';' since the last token
	newline     bool // a line break since the last token
	lowerFrom   int  // >= 0: dst offset of a string literal after redis.call(, lowercased if it is the whole argument
}

// appendNormal appends the normal form of src to dst.
func appendNormal(dst, src []byte) ([]byte, error) {
	n := normalizer{src: src, line: 1, dst: dst, base: len(dst), lowerFrom: -1}
	err := n.run()
	return n.dst, err
}

func (n *normalizer) fail(format string, args ...any) error {
	return &lexError{line: n.line, msg: fmt.Sprintf(format, args...)}
}

func (n *normalizer) run() error {
	s := n.src
	if len(s) >= 2 && s[0] == '#' && s[1] == '!' {
		n.shebang()
	}
	for n.i < len(s) {
		c := s[n.i]
		switch {
		case c == '\n' || c == '\r':
			n.skipNewline()
			n.newline = true
		case c == ' ' || c == '\t' || c == '\v' || c == '\f':
			n.i++
		case c == '-':
			if n.i+1 < len(s) && s[n.i+1] == '-' {
				if err := n.comment(); err != nil {
					return err
				}
				continue
			}
			n.op(1)
		case c == '[':
			level, ok := n.longBracket(n.i)
			switch {
			case ok:
				n.begin(false, false)
				if err := n.longString(level); err != nil {
					return err
				}
				n.endString()
			case level == 0:
				n.op(1)
			default:
				return n.fail("invalid long string delimiter")
			}
		case c == '"' || c == '\'':
			n.begin(false, false)
			if err := n.shortString(c); err != nil {
				return err
			}
			n.endString()
		case c == '.':
			switch {
			case n.i+2 < len(s) && s[n.i+1] == '.' && s[n.i+2] == '.':
				n.op(3)
			case n.i+1 < len(s) && s[n.i+1] == '.':
				n.op(2)
			case n.i+1 < len(s) && isDigit(s[n.i+1]):
				n.number()
			default:
				n.op(1)
			}
		case isDigit(c):
			n.number()
		case isAlpha(c) || c == '_':
			n.name()
		case c == '=' || c == '<' || c == '>' || c == '~':
			if n.i+1 < len(s) && s[n.i+1] == '=' {
				n.op(2)
			} else {
				n.op(1)
			}
		case c == ':':
			if n.i+1 < len(s) && s[n.i+1] == ':' {
				n.op(2)
			} else {
				n.op(1)
			}
		case c == ';':
			n.semi = true
			n.i++
		case c == '+' || c == '*' || c == '/' || c == '%' || c == '^' || c == '#' ||
			c == '(' || c == ')' || c == '{' || c == '}' || c == ']' || c == ',':
			n.op(1)
		default:
			return n.fail("unexpected character %q", c)
		}
	}
	return nil
}

// shebang copies a Redis 7 "#!lua …" first line, without trailing
// whitespace, and ends it with a newline (the only one in a normal form).
func (n *normalizer) shebang() {
	s := n.src
	end := 0
	for end < len(s) && s[end] != '\n' && s[end] != '\r' {
		end++
	}
	line := s[:end]
	for len(line) > 0 && isSpace(line[len(line)-1]) {
		line = line[:len(line)-1]
	}
	n.dst = append(n.dst, line...)
	n.dst = append(n.dst, '\n')
	n.base = len(n.dst)
	n.i = end
}

// skipNewline consumes one line break: \n, \r, \r\n or \n\r, as Lua's
// inclinenumber does.
func (n *normalizer) skipNewline() {
	s := n.src
	c := s[n.i]
	n.i++
	if n.i < len(s) && (s[n.i] == '\n' || s[n.i] == '\r') && s[n.i] != c {
		n.i++
	}
	n.line++
}

// begin starts a token: it settles what was pending from earlier tokens
// and writes the separator. paren says the token is '(', closes says it is
// ',' or ')'.
func (n *normalizer) begin(paren, closes bool) {
	if n.lowerFrom >= 0 {
		if closes {
			lowerASCII(n.dst[n.lowerFrom:])
		}
		n.lowerFrom = -1
	}
	if paren && n.callable && (n.semi || n.newline) {
		n.dst = append(n.dst, " ;"...)
	}
	n.semi, n.newline = false, false
	if len(n.dst) > n.base {
		n.dst = append(n.dst, ' ')
	}
}

// op emits the w-byte operator at the current position.
func (n *normalizer) op(w int) {
	c := n.src[n.i]
	n.begin(w == 1 && c == '(', w == 1 && (c == ')' || c == ','))
	n.dst = append(n.dst, n.src[n.i:n.i+w]...)
	n.i += w
	t := tagOther
	switch {
	case w != 1:
	case c == '.':
		t = tagDot
	case c == ':':
		t = tagColon
	case c == '(' && n.prev == tagCall:
		t = tagCallParen
	}
	n.callable = w == 1 && (c == ')' || c == ']' || c == '}')
	n.push(t)
}

func (n *normalizer) push(t tag) { n.prev2, n.prev = n.prev, t }

func (n *normalizer) name() {
	s := n.src
	start := n.i
	for n.i < len(s) && (isAlpha(s[n.i]) || isDigit(s[n.i]) || s[n.i] == '_') {
		n.i++
	}
	word := s[start:n.i]
	n.begin(false, false)
	t := tagOther
	switch string(word) {
	case "redis":
		if n.prev != tagDot && n.prev != tagColon {
			t = tagRedis
		}
	case "call", "pcall":
		if n.prev == tagDot && n.prev2 == tagRedis {
			t = tagCall
			word = word[len(word)-len("call"):]
		}
	}
	n.dst = append(n.dst, word...)
	n.callable = !isKeyword(word)
	n.push(t)
}

// number copies a numeral verbatim, consuming what Lua 5.1's read_numeral
// does: digits and dots, an optional exponent sign, then letters, digits
// and underscores (so 0x1F and even malformed 1..2 stay one token).
func (n *normalizer) number() {
	s := n.src
	start := n.i
	for n.i < len(s) && (isDigit(s[n.i]) || s[n.i] == '.') {
		n.i++
	}
	if n.i < len(s) && (s[n.i] == 'e' || s[n.i] == 'E') {
		n.i++
		if n.i < len(s) && (s[n.i] == '+' || s[n.i] == '-') {
			n.i++
		}
	}
	for n.i < len(s) && (isAlpha(s[n.i]) || isDigit(s[n.i]) || s[n.i] == '_') {
		n.i++
	}
	n.begin(false, false)
	n.dst = append(n.dst, s[start:n.i]...)
	n.callable = false
	n.push(tagOther)
}

// lowerASCII lowercases A-Z in place. Applied to a canonical literal it
// lowercases the value: escapes are written with lowercase letters and
// digits only.
func lowerASCII(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// isKeyword reports whether w is a Lua 5.1 reserved word.
func isKeyword(w []byte) bool {
	switch string(w) {
	case "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if",
		"in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while":
		return true
	}
	return false
}
