package proxy

import "github.com/lockproxy/lockproxy/internal/resp"

// RESP error prefixes that are part of the contract: one place defines them.
const (
	errPrefixNoQuorum = "NOQUORUM"
	errPrefixNoScript = "NOSCRIPT"
	errPrefixNoAuth   = "NOAUTH"
	errPrefixWrongPwd = "WRONGPASS"
)

// Reply encoding is internal/resp's: it appends to the connection's output
// buffer, no allocation per reply on the hot path; resp3 selects RESP3
// types after HELLO 3. These wrappers keep the command layer's names while
// it is rewritten; call resp directly in new code.

func appendStatus(b []byte, s string) []byte { return resp.AppendStatus(b, s) }

// appendError appends an error reply; msg starts with its prefix (ERR,
// NOQUORUM…). Line breaks would break the protocol and are replaced.
func appendError(b []byte, msg string) []byte { return resp.AppendError(b, msg) }

func appendInt(b []byte, n int64) []byte { return resp.AppendInt(b, n) }

func appendBulk(b []byte, s []byte) []byte { return resp.AppendBulk(b, s) }

func appendBulkString(b []byte, s string) []byte { return resp.AppendBulkString(b, s) }

func appendNull(b []byte, resp3 bool) []byte { return resp.AppendNull(b, resp3) }

func appendArrayHeader(b []byte, n int) []byte { return resp.AppendArrayHeader(b, n) }

// appendMapHeader starts a map of n pairs: a RESP3 map, or a flat array
// of 2n elements in RESP2.
func appendMapHeader(b []byte, n int, resp3 bool) []byte { return resp.AppendMapHeader(b, n, resp3) }

// appendVerbatim appends a text blob (INFO): verbatim string in RESP3.
func appendVerbatim(b []byte, s string, resp3 bool) []byte { return resp.AppendVerbatim(b, s, resp3) }

// appendReply encodes a master's reply for the client.
func appendReply(b []byte, r resp.Reply, resp3 bool) []byte { return resp.AppendReply(b, r, resp3) }
