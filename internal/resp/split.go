package resp

import "bytes"

// NextCommand splits the first command of b, which a Guard validated, into
// args (reusing its memory) and returns the rest of b. The arguments of a
// multibulk command are slices of b; an inline (telnet-style) command is
// split by SplitInline, in place. A blank line is no command (no args);
// err is a *ProtocolError (unbalanced quotes), after which the stream
// cannot be trusted.
func NextCommand(b []byte, args [][]byte) ([][]byte, []byte, error) {
	args = args[:0]
	if b[0] != '*' {
		nl := bytes.IndexByte(b, '\n')
		line, rest := b[:nl], b[nl+1:]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		args, err := SplitInline(line, args)
		return args, rest, err
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

// SplitInline splits an inline command line, without its line end, into
// args as Redis does (sdssplitargs in sds.c): arguments are separated by
// blanks; "double quotes" take the escapes \n \r \t \b \a \xHH and \ before
// any other character, 'single quotes' take \'; a closing quote must be
// followed by a blank or the end, and a quote left open is an error. A
// quote may open in the middle of an argument (a"b c" is `ab c`).
//
// A NUL byte is an ordinary byte. Redis never answers a line that holds
// one (it looks for the line's end with strchr, which stops at the NUL,
// and waits for more until its 64 KiB limit); cutting the line there, as
// the C string would, could run a shorter command than the client sent.
//
// The arguments are appended to args (none on error), unquoted in place:
// they are slices of line, which is overwritten (each one is never longer
// than its quoted form).
func SplitInline(line []byte, args [][]byte) ([][]byte, error) {
	n0, p := len(args), 0
	for {
		for p < len(line) && isSpace(line[p]) {
			p++
		}
		if p == len(line) {
			return args, nil
		}
		start := p
		end, next, ok := unquote(line, p)
		if !ok {
			return args[:n0], errUnbalanced
		}
		args = append(args, line[start:end:end])
		p = next
	}
}

// unquote reads the argument that starts at line[p], writing it unquoted
// from line[p] on: it returns the end of what it wrote and where the next
// argument may start, or !ok for unbalanced quotes. The write position
// never passes the read position: every escape is longer than what it
// stands for.
func unquote(line []byte, p int) (end, next int, ok bool) {
	w := p
	inq, insq := false, false
	for ; p < len(line); p++ {
		c := line[p]
		switch {
		case inq:
			switch {
			case c == '\\' && p+3 < len(line) && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]):
				line[w] = hexVal(line[p+2])<<4 | hexVal(line[p+3])
				p += 3
			case c == '\\' && p+1 < len(line):
				p++
				line[w] = unescape(line[p])
			case c == '"':
				return closeQuote(line, w, p)
			default:
				line[w] = c
			}
		case insq:
			switch {
			case c == '\\' && p+1 < len(line) && line[p+1] == '\'':
				p++
				line[w] = '\''
			case c == '\'':
				return closeQuote(line, w, p)
			default:
				line[w] = c
			}
		default:
			switch c {
			case ' ', '\n', '\r', '\t':
				return w, p + 1, true
			case '"':
				inq = true
				continue
			case '\'':
				insq = true
				continue
			default:
				line[w] = c
			}
		}
		w++
	}
	return w, p, !inq && !insq
}

// closeQuote ends an argument at its closing quote, line[p]: a blank or
// the end must follow.
func closeQuote(line []byte, w, p int) (end, next int, ok bool) {
	if p+1 < len(line) && !isSpace(line[p+1]) {
		return 0, 0, false
	}
	return w, p + 1, true
}

// unescape is the byte that \c stands for inside double quotes.
func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	}
	return c
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
