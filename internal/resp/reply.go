package resp

import "strconv"

// Reply types, named by their prefix byte. Masters are spoken to in RESP2,
// so they send only the first six; the RESP3 ones are parsed by Parse3 and
// encoded by AppendReply for clients that said HELLO 3.
const (
	Status  = '+'
	Error   = '-' // also a RESP3 blob error ('!')
	Integer = ':'
	Bulk    = '$'
	Array   = '*'
	Nil     = '_' // a nil bulk ($-1), nil array (*-1) or RESP3 null

	Double    = ',' // Str holds its text
	Boolean   = '#' // Int is 1 (true) or 0
	BigNumber = '(' // Str holds its digits
	Verbatim  = '=' // Str holds the text, without its "txt:" format
	Map       = '%' // Elems holds key, value, key, value…
	Set       = '~'
	Push      = '>'
)

// Reply is one parsed reply.
type Reply struct {
	Type  byte
	Int   int64   // Integer, Boolean
	Str   []byte  // Status, Error, Bulk, Double, BigNumber, Verbatim
	Elems []Reply // Array, Map, Set, Push
}

// Common replies, shared so that parsing them allocates nothing. Their
// Str must not be modified.
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
	case Status, Error, Double, BigNumber:
		return string(r.Str)
	case Integer:
		return strconv.FormatInt(r.Int, 10)
	case Boolean:
		return strconv.FormatBool(r.Int != 0)
	case Bulk, Verbatim:
		return strconv.Quote(string(r.Str))
	case Nil:
		return "(nil)"
	case Array, Map, Set, Push:
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
