package resp

// MaxDepth bounds nested aggregates, so that a hostile or broken peer
// cannot exhaust the stack.
const MaxDepth = 16

// Parse parses one RESP2 reply, what a master sends, from the start of b.
// It returns the reply and the number of bytes it used, ErrIncomplete when
// b holds only part of a reply, or ErrMalformed. Strings are copied out of
// b, which the caller reuses, except the common "OK" status; replies
// without strings (+OK, nil, integers) allocate nothing.
func Parse(b []byte) (Reply, int, error) { return parse(b, 0, false) }

// Parse3 is Parse for RESP3 as well: null, double, boolean, big number,
// blob error (as Error), verbatim string, map, set and push. Attributes are
// malformed: lockproxy never asks for them.
func Parse3(b []byte) (Reply, int, error) { return parse(b, 0, true) }

func parse(b []byte, depth int, resp3 bool) (Reply, int, error) {
	if len(b) == 0 {
		return Reply{}, 0, ErrIncomplete
	}
	if depth > MaxDepth {
		return Reply{}, 0, ErrMalformed
	}
	line, n := readLine(b)
	if n < 0 {
		return Reply{}, 0, ErrIncomplete
	}
	t := b[0]
	line = line[1:]
	switch t {
	case Status:
		if len(line) == 2 && line[0] == 'O' && line[1] == 'K' {
			return ReplyOK, n, nil
		}
		return Reply{Type: Status, Str: append([]byte(nil), line...)}, n, nil
	case Error:
		return Reply{Type: Error, Str: append([]byte(nil), line...)}, n, nil
	case Integer:
		v, ok := parseInt(line)
		if !ok {
			return Reply{}, 0, ErrMalformed
		}
		return Reply{Type: Integer, Int: v}, n, nil
	case Bulk:
		// parseBulk's code, inline: this is the hot path of GET and of
		// the nil reply to a refused SET NX.
		l, ok := parseInt(line)
		switch {
		case !ok || l < -1:
			return Reply{}, 0, ErrMalformed
		case l == -1:
			return ReplyNil, n, nil
		case l > int64(len(b)-n-2): // no overflow: l is bounded by len(b) first
			return Reply{}, 0, ErrIncomplete
		}
		end := n + int(l)
		if b[end] != '\r' || b[end+1] != '\n' {
			return Reply{}, 0, ErrMalformed
		}
		return Reply{Type: Bulk, Str: append(make([]byte, 0, l), b[n:end]...)}, end + 2, nil
	case Array:
		return parseAggregate(b, line, n, depth, resp3, Array)
	}
	if resp3 {
		return parse3(b, t, line, n, depth)
	}
	return Reply{}, 0, ErrMalformed
}

// parse3 parses the RESP3 types whose header line, without its type byte t,
// is line and ends at n.
func parse3(b []byte, t byte, line []byte, n, depth int) (Reply, int, error) {
	switch t {
	case Nil:
		if len(line) == 0 {
			return ReplyNil, n, nil
		}
	case Double:
		if len(line) > 0 {
			return Reply{Type: Double, Str: append([]byte(nil), line...)}, n, nil
		}
	case Boolean:
		if len(line) == 1 && (line[0] == 't' || line[0] == 'f') {
			r := Reply{Type: Boolean}
			if line[0] == 't' {
				r.Int = 1
			}
			return r, n, nil
		}
	case BigNumber:
		digits := line
		if len(digits) > 0 && digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) > 0 && allDigits(digits) {
			return Reply{Type: BigNumber, Str: append([]byte(nil), line...)}, n, nil
		}
	case '!':
		r, m, err := parseBulk(b, line, n, Error)
		if err == nil && r.Type != Error {
			err = ErrMalformed // a null blob error
		}
		return r, m, err
	case Verbatim:
		r, m, err := parseBulk(b, line, n, Verbatim)
		if err != nil {
			return r, m, err
		}
		if r.Type != Verbatim || len(r.Str) < 4 || r.Str[3] != ':' {
			return Reply{}, 0, ErrMalformed
		}
		r.Str = r.Str[4:]
		return r, m, nil
	case Map, Set, Push:
		return parseAggregate(b, line, n, depth, true, t)
	}
	return Reply{}, 0, ErrMalformed
}

// parseBulk parses a length-prefixed string of type t whose length is line
// and whose body starts at n. A length of -1 is the nil reply.
func parseBulk(b, line []byte, n int, t byte) (Reply, int, error) {
	l, ok := parseInt(line)
	switch {
	case !ok || l < -1:
		return Reply{}, 0, ErrMalformed
	case l == -1:
		return ReplyNil, n, nil
	case l > int64(len(b)-n-2): // no overflow: l is bounded by len(b) first
		return Reply{}, 0, ErrIncomplete
	}
	end := n + int(l)
	if b[end] != '\r' || b[end+1] != '\n' {
		return Reply{}, 0, ErrMalformed
	}
	return Reply{Type: t, Str: append(make([]byte, 0, l), b[n:end]...)}, end + 2, nil
}

// parseAggregate parses an aggregate of type t whose count is line and
// whose elements start at n. A map's count is of pairs.
func parseAggregate(b, line []byte, n, depth int, resp3 bool, t byte) (Reply, int, error) {
	l, ok := parseInt(line)
	switch {
	case !ok || l < -1 || (l == -1 && t != Array):
		return Reply{}, 0, ErrMalformed
	case l == -1:
		return ReplyNil, n, nil
	}
	if t == Map {
		if l > 1<<61 {
			return Reply{}, 0, ErrMalformed
		}
		l *= 2
	}
	// Every element takes at least 3 bytes ("_\r\n"): a count the buffer
	// cannot hold is incomplete, before anything is allocated for it.
	if l > int64(len(b)-n)/3 {
		return Reply{}, 0, ErrIncomplete
	}
	elems := make([]Reply, l)
	for i := range elems {
		var m int
		var err error
		if elems[i], m, err = parse(b[n:], depth+1, resp3); err != nil {
			return Reply{}, 0, err
		}
		n += m
	}
	return Reply{Type: t, Elems: elems}, n, nil
}

// readLine returns the line at the start of b, type byte included, without
// its CRLF, and the length including it; n = -1 when b holds no complete
// line. The CRLF comes after the type byte: "\r\n" alone is no line.
func readLine(b []byte) (line []byte, n int) {
	for i := 2; i < len(b); i++ {
		if b[i] == '\n' && b[i-1] == '\r' {
			return b[:i-1], i + 1
		}
	}
	return nil, -1
}

// parseInt parses a signed decimal int64 as strconv.ParseInt(s, 10, 64)
// does, without converting to a string.
func parseInt(s []byte) (int64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63 {
			return 0, false
		}
	}
	if neg {
		return -int64(n), true // n == 1<<63 gives MinInt64
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

func allDigits(s []byte) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
