package resp

import "errors"

// Errors of the package, checked with errors.Is (the sentinels) or
// errors.As (*ProtocolError).
var (
	// ErrIncomplete means the buffer ends inside a reply: read more.
	ErrIncomplete = errors.New("resp: incomplete reply")
	// ErrMalformed means the bytes are not RESP (or, from Parse, not
	// RESP2): the connection cannot be trusted any more.
	ErrMalformed = errors.New("resp: malformed reply")
	// ErrStopped is Guard.Fill's error once the stream has ended at a
	// protocol error (or the Budget refused room to read into): nothing
	// more is read, and Broken reports why once the commands before it
	// were taken.
	ErrStopped = errors.New("resp: the client stream ended at a protocol error")
)

// ProtocolError is a client stream lockproxy will not parse: malformed
// RESP, or a command past the limits. The client gets Reply (for most,
// "-ERR Protocol error: <Msg>") and its connection is closed.
type ProtocolError struct {
	Msg string
	// OverBudget: the connection is closed for the memory all clients
	// hold (Budget), not for what it sent; its reply is "-ERR <Msg>".
	OverBudget bool
}

func (e *ProtocolError) Error() string { return e.Reply() }

// Reply is the error line the client gets, without its '-'.
func (e *ProtocolError) Reply() string {
	if e.OverBudget {
		return "ERR " + e.Msg
	}
	return "ERR Protocol error: " + e.Msg
}

// errUnbalanced is Redis's reply to an inline command it cannot split.
var errUnbalanced = &ProtocolError{Msg: "unbalanced quotes in request"}
