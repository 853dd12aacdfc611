// Package resp encodes and decodes RESP2 and RESP3, the Redis protocol,
// for every layer of lockproxy: the one place where its bytes are read or
// written.
//
// Master side: commands are encoded by appending to a byte slice
// (AppendCommand, AppendArrayHeader, AppendBulk…), and replies are parsed
// from a buffer (Parse, within MaxDepth, reporting ErrIncomplete or
// ErrMalformed) or read one at a time from a stream (Reader, for
// connections the master writes to unprompted).
//
// Client side: the byte stream a client sends is validated incrementally by
// a Guard, within its Limits, the pre-authentication limits and a memory
// Budget shared by all connections; NextCommand splits what the Guard
// validated into arguments, inline (telnet) commands included, with
// Redis's own grammar. Replies are encoded by appending, in RESP2 or RESP3
// as the connection chose (AppendStatus, AppendError, AppendNull,
// AppendMapHeader, AppendReply…).
//
// Nothing here allocates per command or per reply on the hot path: the
// encoders append, the Guard validates in place, and parsing the replies
// locks get (+OK, nil, integers) allocates nothing.
package resp
