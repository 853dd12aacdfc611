package catalog

// Lua 5.1 string literals and comments for the normalizer (normalize.go):
// short strings with their escapes, long brackets, and comments, each
// written in the normal form.

// endString records an emitted string literal.
func (n *normalizer) endString() {
	n.callable = true // f"x" is a call, and so may be f"x"(…)
	n.push(tagOther)
}

// openString writes the opening quote; a literal that is the first token
// after redis.call( may be a command name.
func (n *normalizer) openString() {
	if n.prev == tagCallParen {
		n.lowerFrom = len(n.dst)
	}
	n.dst = append(n.dst, '"')
}

// shortString reads a '…' or "…" literal (Lua 5.1 read_string) and writes
// its bytes canonically.
func (n *normalizer) shortString(quote byte) error {
	s := n.src
	n.openString()
	n.i++
	for {
		if n.i >= len(s) {
			return n.fail("unfinished string")
		}
		c := s[n.i]
		switch {
		case c == quote:
			n.i++
			n.dst = append(n.dst, '"')
			return nil
		case c == '\n' || c == '\r':
			return n.fail("unfinished string")
		case c != '\\':
			n.putByte(c)
			n.i++
			continue
		}
		n.i++ // the backslash
		if n.i >= len(s) {
			return n.fail("unfinished string")
		}
		c = s[n.i]
		switch c {
		case 'a':
			n.putByte('\a')
		case 'b':
			n.putByte('\b')
		case 'f':
			n.putByte('\f')
		case 'n':
			n.putByte('\n')
		case 'r':
			n.putByte('\r')
		case 't':
			n.putByte('\t')
		case 'v':
			n.putByte('\v')
		case '\n', '\r':
			n.putByte('\n')
			n.skipNewline()
			continue
		default:
			if !isDigit(c) {
				// \\ \" \' and, in Lua 5.1, any other escaped character
				// stands for itself ("\x41" is "x41").
				n.putByte(c)
				break
			}
			v := 0
			for k := 0; k < 3 && n.i < len(s) && isDigit(s[n.i]); k++ {
				v = 10*v + int(s[n.i]-'0')
				n.i++
			}
			if v > 255 {
				return n.fail("escape sequence too large")
			}
			n.putByte(byte(v))
			continue
		}
		n.i++
	}
}

// longBracket reports the level of a long bracket opening at p ("[[" is 0,
// "[==[" is 2). ok is false when there is none; level is then the number of
// '=' seen, so a lone '[' has level 0 and "[=" is an error.
func (n *normalizer) longBracket(p int) (level int, ok bool) {
	s := n.src
	j := p + 1
	for j < len(s) && s[j] == '=' {
		j++
	}
	level = j - p - 1
	return level, j < len(s) && s[j] == '['
}

// longString reads a [[…]] or [==[…]==] literal (Lua 5.1
// read_long_string) and writes its bytes as a short literal.
func (n *normalizer) longString(level int) error {
	n.openString()
	if err := n.longBody(level, true); err != nil {
		return err
	}
	n.dst = append(n.dst, '"')
	return nil
}

// longBody consumes a long bracket's opening, body and closing; emit says
// whether to write the body (strings) or skip it (comments). As in Lua 5.1,
// a first line break is dropped, each line break reads as \n, and a nested
// "[[" is an error at level 0.
func (n *normalizer) longBody(level int, emit bool) error {
	s := n.src
	n.i += level + 2
	if n.i < len(s) && (s[n.i] == '\n' || s[n.i] == '\r') {
		n.skipNewline()
	}
	for {
		if n.i >= len(s) {
			if emit {
				return n.fail("unfinished long string")
			}
			return n.fail("unfinished long comment")
		}
		switch c := s[n.i]; c {
		case ']':
			j := n.i + 1
			for j < len(s) && s[j] == '=' {
				j++
			}
			if j-n.i-1 == level && j < len(s) && s[j] == ']' {
				n.i = j + 1
				return nil
			}
			if emit {
				n.putByte(c)
			}
			n.i++
		case '[':
			if level == 0 && n.i+1 < len(s) && s[n.i+1] == '[' {
				return n.fail("nesting of [[...]] is deprecated")
			}
			if emit {
				n.putByte(c)
			}
			n.i++
		case '\n', '\r':
			n.skipNewline()
			if emit {
				n.putByte('\n')
			}
		default:
			if emit {
				n.putByte(c)
			}
			n.i++
		}
	}
}

// comment skips a -- line comment or a --[[ ]] / --[==[ ]==] block comment.
func (n *normalizer) comment() error {
	s := n.src
	n.i += 2
	if n.i < len(s) && s[n.i] == '[' {
		if level, ok := n.longBracket(n.i); ok {
			line := n.line
			if err := n.longBody(level, false); err != nil {
				return err
			}
			if n.line != line {
				n.newline = true
			}
			return nil
		}
	}
	for n.i < len(s) && s[n.i] != '\n' && s[n.i] != '\r' {
		n.i++
	}
	return nil
}

// putByte writes one byte of a string literal's value in canonical form:
// printable ASCII and bytes >= 0x80 as they are, \\ \" \n \r \t, and any
// other control byte as a three-digit decimal escape (three digits, so a
// digit that follows cannot join it).
func (n *normalizer) putByte(c byte) {
	switch {
	case c == '"' || c == '\\':
		n.dst = append(n.dst, '\\', c)
	case c == '\n':
		n.dst = append(n.dst, '\\', 'n')
	case c == '\r':
		n.dst = append(n.dst, '\\', 'r')
	case c == '\t':
		n.dst = append(n.dst, '\\', 't')
	case c < 0x20 || c == 0x7f:
		n.dst = append(n.dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
	default:
		n.dst = append(n.dst, c)
	}
}
