package batching

import (
	"errors"
	"strconv"
)

// Reply types, named by their RESP2 prefix byte. Masters are spoken to in
// RESP2, so these are all the shapes a master can send.
const (
	Status  = '+'
	Error   = '-'
	Integer = ':'
	Bulk    = '$'
	Array   = '*'
	Nil     = '_' // a nil bulk ($-1) or nil array (*-1)
)

// Reply is one parsed reply of a master.
type Reply struct {
	Type  byte
	Int   int64   // Integer
	Str   []byte  // Status, Error, Bulk
	Elems []Reply // Array
}

// Common replies, shared so that parsing them allocates nothing.
var (
	ReplyOK  = Reply{Type: Status, Str: []byte("OK")}
	ReplyNil = Reply{Type: Nil}
)

// IsOK reports whether r is the status reply OK.
func (r Reply) IsOK() bool { return r.Type == Status && string(r.Str) == "OK" }

// IsInt reports whether r is the integer n.
func (r Reply) IsInt(n int64) bool { return r.Type == Integer && r.Int == n }

// Equal reports whether two replies have the same type and content.
func (r Reply) Equal(o Reply) bool {
	if r.Type != o.Type || r.Int != o.Int || string(r.Str) != string(o.Str) || len(r.Elems) != len(o.Elems) {
		return false
	}
	for i := range r.Elems {
		if !r.Elems[i].Equal(o.Elems[i]) {
			return false
		}
	}
	return true
}

// String renders a reply for logs and error messages.
func (r Reply) String() string {
	switch r.Type {
	case Status, Error:
		return string(r.Str)
	case Integer:
		return strconv.FormatInt(r.Int, 10)
	case Bulk:
		return strconv.Quote(string(r.Str))
	case Nil:
		return "(nil)"
	case Array:
		s := "["
		for i, e := range r.Elems {
			if i > 0 {
				s += " "
			}
			s += e.String()
		}
		return s + "]"
	}
	return "?"
}

// errIncomplete means the buffer ends inside a reply: read more.
var errIncomplete = errors.New("incomplete reply")

// errMalformed means the master sent bytes that are not RESP2.
var errMalformed = errors.New("malformed reply from master")

// maxReplyDepth bounds nested arrays, so a hostile or broken master cannot
// exhaust the stack.
const maxReplyDepth = 16

// parseReply parses one reply from the start of b. It returns the reply and
// the number of bytes consumed, errIncomplete when b holds only part of a
// reply, or errMalformed. Strings are copied out of b, which the caller
// reuses, except the common "OK" status.
func parseReply(b []byte, depth int) (Reply, int, error) {
	if len(b) == 0 {
		return Reply{}, 0, errIncomplete
	}
	if depth > maxReplyDepth {
		return Reply{}, 0, errMalformed
	}
	line, n := readLine(b)
	if n < 0 {
		return Reply{}, 0, errIncomplete
	}
	t := b[0]
	line = line[1:]
	switch t {
	case Status:
		if string(line) == "OK" {
			return ReplyOK, n, nil
		}
		return Reply{Type: Status, Str: append([]byte(nil), line...)}, n, nil
	case Error:
		return Reply{Type: Error, Str: append([]byte(nil), line...)}, n, nil
	case Integer:
		v, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return Reply{}, 0, errMalformed
		}
		return Reply{Type: Integer, Int: v}, n, nil
	case Bulk:
		l, err := strconv.Atoi(string(line))
		if err != nil || l < -1 {
			return Reply{}, 0, errMalformed
		}
		if l == -1 {
			return ReplyNil, n, nil
		}
		if len(b) < n+l+2 {
			return Reply{}, 0, errIncomplete
		}
		if b[n+l] != '\r' || b[n+l+1] != '\n' {
			return Reply{}, 0, errMalformed
		}
		return Reply{Type: Bulk, Str: append(make([]byte, 0, l), b[n:n+l]...)}, n + l + 2, nil
	case Array:
		l, err := strconv.Atoi(string(line))
		if err != nil || l < -1 {
			return Reply{}, 0, errMalformed
		}
		if l == -1 {
			return ReplyNil, n, nil
		}
		elems := make([]Reply, l)
		for i := range elems {
			e, m, err := parseReply(b[n:], depth+1)
			if err != nil {
				return Reply{}, 0, err
			}
			elems[i] = e
			n += m
		}
		return Reply{Type: Array, Elems: elems}, n, nil
	}
	return Reply{}, 0, errMalformed
}

// readLine returns the line at the start of b without its CRLF and the
// length including it, or n = -1 when b holds no complete line.
func readLine(b []byte) (line []byte, n int) {
	for i := 1; i < len(b); i++ {
		if b[i] == '\n' && b[i-1] == '\r' {
			return b[:i-1], i + 1
		}
	}
	return nil, -1
}

// AppendCommand appends args to dst as one RESP2 command (an array of bulk
// strings), the form every Redis accepts.
func AppendCommand(dst []byte, args ...[]byte) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendBulk appends b to dst as one RESP bulk string, an argument of a
// command.
func AppendBulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}
