package proxy

import (
	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Client input passes through a resp.Guard (internal/resp) on both
// transports: these are the settings it takes from Config.

// guardLimits are the limits of one client's input. A client may send up
// to pauseAt bytes ahead of the command being read (loopclient.go).
func guardLimits(cfg Config) resp.Limits {
	return resp.Limits{
		MaxBulk:    int64(cfg.MaxBulkLen),
		MaxArgs:    int64(cfg.MaxArgs),
		MaxCommand: int64(cfg.MaxQueryBuffer),
		ReadAhead:  pauseAt,
	}
}

// fdReader reads a non-blocking socket of the event loop: what the Guard
// fills its buffer from, at most readChunk per read.
type fdReader int

func (fd fdReader) Read(p []byte) (int, error) {
	if len(p) > readChunk {
		p = p[:readChunk]
	}
	return evloop.Read(int(fd), p)
}

// readChunk bounds one read of a client socket, and so what one readiness
// event costs the loop (reading and validating it): a client that sends
// megabytes is read 16 KiB a turn, as Redis reads (PROTO_IOBUF_LEN), and
// TLS clients are (streamChunk). Lock commands are tens of bytes; a
// pipeline of them, a few KiB.
const readChunk = 16 << 10
