package proxy

import (
	"strconv"

	"github.com/lockproxy/lockproxy/batching"
)

// RESP error prefixes that are part of the contract: one place defines them.
const (
	errPrefixNoQuorum = "NOQUORUM"
	errPrefixNoScript = "NOSCRIPT"
	errPrefixNoAuth   = "NOAUTH"
	errPrefixWrongPwd = "WRONGPASS"
)

// Reply encoding appends to the connection's output buffer: no allocation
// per reply on the hot path. resp3 selects RESP3 types after HELLO 3.

func appendStatus(b []byte, s string) []byte {
	b = append(b, '+')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendError appends an error reply; msg starts with its prefix (ERR,
// NOQUORUM…). Line breaks would break the protocol and are replaced.
func appendError(b []byte, msg string) []byte {
	b = append(b, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

func appendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendBulkString(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendNull(b []byte, resp3 bool) []byte {
	if resp3 {
		return append(b, '_', '\r', '\n')
	}
	return append(b, '$', '-', '1', '\r', '\n')
}

func appendArrayHeader(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendMapHeader starts a map of n pairs: a RESP3 map, or a flat array
// of 2n elements in RESP2.
func appendMapHeader(b []byte, n int, resp3 bool) []byte {
	if !resp3 {
		return appendArrayHeader(b, 2*n)
	}
	b = append(b, '%')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendVerbatim appends a text blob (INFO): verbatim string in RESP3.
func appendVerbatim(b []byte, s string, resp3 bool) []byte {
	if !resp3 {
		return appendBulkString(b, s)
	}
	b = append(b, '=')
	b = strconv.AppendInt(b, int64(len(s)+4), 10)
	b = append(b, "\r\ntxt:"...)
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendReply encodes a master's reply for the client.
func appendReply(b []byte, r batching.Reply, resp3 bool) []byte {
	switch r.Type {
	case batching.Status:
		b = append(b, '+')
		b = append(b, r.Str...)
		return append(b, '\r', '\n')
	case batching.Error:
		return appendError(b, string(r.Str))
	case batching.Integer:
		return appendInt(b, r.Int)
	case batching.Bulk:
		return appendBulk(b, r.Str)
	case batching.Array:
		b = appendArrayHeader(b, len(r.Elems))
		for _, e := range r.Elems {
			b = appendReply(b, e, resp3)
		}
		return b
	default:
		return appendNull(b, resp3)
	}
}
