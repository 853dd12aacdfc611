package batching

import "github.com/lockproxy/lockproxy/internal/resp"

// Aliases of internal/resp for the callers not moved to it yet (the proxy
// package and proxy/catalog; quorum uses internal/resp): batching's own
// code uses internal/resp. Delete these once nothing outside batching
// refers to them.

// Reply is resp.Reply.
type Reply = resp.Reply

// Reply types: resp's.
const (
	Status  = resp.Status
	Error   = resp.Error
	Integer = resp.Integer
	Bulk    = resp.Bulk
	Array   = resp.Array
	Nil     = resp.Nil
)

// Common replies: resp's.
var (
	ReplyOK  = resp.ReplyOK
	ReplyNil = resp.ReplyNil
)

// AppendCommand is resp.AppendCommand.
func AppendCommand(dst []byte, args ...[]byte) []byte { return resp.AppendCommand(dst, args...) }

// AppendBulk is resp.AppendBulk.
func AppendBulk(dst, b []byte) []byte { return resp.AppendBulk(dst, b) }
