package resp

import "strconv"

// Encoding appends to a caller's buffer (a connection's output, a batch
// for a master): no allocation per command or reply. The command encoders
// write RESP2, which every Redis accepts; the reply encoders write RESP2
// or, with resp3 set (the client said HELLO 3), RESP3.

// AppendArrayHeader starts an array of n elements: a command of n
// arguments, or an array reply.
func AppendArrayHeader(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendBulk appends s as one bulk string: an argument of a command, or a
// bulk reply.
func AppendBulk(b, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkString is AppendBulk of a string.
func AppendBulkString(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkInt appends n in decimal as a bulk string: a numeric argument
// (numkeys, a TTL).
func AppendBulkInt(b []byte, n int64) []byte {
	var d [20]byte
	return AppendBulk(b, strconv.AppendInt(d[:0], n, 10))
}

// AppendCommand appends args as one command: an array of bulk strings.
func AppendCommand(b []byte, args ...[]byte) []byte {
	b = AppendArrayHeader(b, len(args))
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// AppendCommandString is AppendCommand of strings.
func AppendCommandString(b []byte, args ...string) []byte {
	b = AppendArrayHeader(b, len(args))
	for _, a := range args {
		b = AppendBulkString(b, a)
	}
	return b
}

// AppendAuth appends the AUTH a connection to a master starts with when
// the masters want a password: AUTH password for the default user, AUTH
// username password for an ACL user. Without a password it appends
// nothing (a master without one refuses AUTH). The credentials are values
// wherever they travel; this is the one place they become a command.
func AppendAuth(b []byte, username, password string) []byte {
	switch {
	case password == "":
		return b
	case username == "":
		return AppendCommandString(b, "AUTH", password)
	}
	return AppendCommandString(b, "AUTH", username, password)
}

// AppendStatus appends a status reply (+OK). s must not hold a line break.
func AppendStatus(b []byte, s string) []byte {
	b = append(b, '+')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendError appends an error reply; msg starts with its prefix (ERR,
// NOQUORUM…). Line breaks would break the protocol and are replaced by
// spaces.
func AppendError(b []byte, msg string) []byte { return appendLine(b, '-', msg) }

// appendLine appends a simple string of type t, its line breaks replaced.
func appendLine[S string | []byte](b []byte, t byte, msg S) []byte {
	b = append(b, t)
	start := len(b)
	b = append(b, msg...)
	for i := start; i < len(b); i++ {
		if b[i] == '\r' || b[i] == '\n' {
			b[i] = ' '
		}
	}
	return append(b, '\r', '\n')
}

// AppendInt appends an integer reply.
func AppendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendNull appends the null reply: _ in RESP3, a nil bulk in RESP2.
func AppendNull(b []byte, resp3 bool) []byte {
	if resp3 {
		return append(b, '_', '\r', '\n')
	}
	return append(b, '$', '-', '1', '\r', '\n')
}

// AppendMapHeader starts a map of n pairs: a RESP3 map, or a flat array of
// 2n elements in RESP2.
func AppendMapHeader(b []byte, n int, resp3 bool) []byte {
	if !resp3 {
		return AppendArrayHeader(b, 2*n)
	}
	return appendHeader(b, Map, n)
}

// AppendSetHeader starts a set of n elements: an array in RESP2.
func AppendSetHeader(b []byte, n int, resp3 bool) []byte {
	if !resp3 {
		return AppendArrayHeader(b, n)
	}
	return appendHeader(b, Set, n)
}

// AppendPushHeader starts an out-of-band message of n elements (pub/sub):
// a RESP3 push, an array in RESP2.
func AppendPushHeader(b []byte, n int, resp3 bool) []byte {
	if !resp3 {
		return AppendArrayHeader(b, n)
	}
	return appendHeader(b, Push, n)
}

func appendHeader(b []byte, t byte, n int) []byte {
	b = append(b, t)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendVerbatim appends a text blob (INFO): a verbatim string of format
// txt in RESP3, a bulk string in RESP2.
func AppendVerbatim(b []byte, s string, resp3 bool) []byte { return appendVerbatim(b, s, resp3) }

func appendVerbatim[S string | []byte](b []byte, s S, resp3 bool) []byte {
	if !resp3 {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, '\r', '\n')
		b = append(b, s...)
		return append(b, '\r', '\n')
	}
	b = append(b, '=')
	b = strconv.AppendInt(b, int64(len(s)+4), 10)
	b = append(b, "\r\ntxt:"...)
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendReply encodes r, a master's reply, for a client. The RESP3 types
// become what Redis sends a RESP2 client in their place: a boolean an
// integer, a double or big number a bulk string, a map a flat array. A
// zero Reply is the null reply.
func AppendReply(b []byte, r Reply, resp3 bool) []byte {
	switch r.Type {
	case Status:
		return appendLine(b, '+', r.Str)
	case Error:
		return appendLine(b, '-', r.Str)
	case Integer:
		return AppendInt(b, r.Int)
	case Bulk:
		return AppendBulk(b, r.Str)
	case Array, Set, Push, Map:
		n := len(r.Elems)
		switch {
		case r.Type == Array || !resp3:
			b = AppendArrayHeader(b, n)
		case r.Type == Map:
			b = appendHeader(b, Map, n/2)
		default:
			b = appendHeader(b, r.Type, n)
		}
		for _, e := range r.Elems {
			b = AppendReply(b, e, resp3)
		}
		return b
	case Boolean:
		if !resp3 {
			return AppendInt(b, r.Int)
		}
		if r.Int != 0 {
			return append(b, "#t\r\n"...)
		}
		return append(b, "#f\r\n"...)
	case Double, BigNumber:
		if !resp3 {
			return AppendBulk(b, r.Str)
		}
		return appendLine(b, r.Type, r.Str)
	case Verbatim:
		return appendVerbatim(b, r.Str, resp3)
	default:
		return AppendNull(b, resp3)
	}
}
