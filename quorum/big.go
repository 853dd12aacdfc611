package quorum

import (
	"fmt"

	"github.com/lockproxy/lockproxy/batching"
)

// Large commands. Every command goes to every master, on one connection
// each, in order: a lock command behind megabytes of others on a master's
// connection waits for the master to read and run them all. Clients may
// send arguments of up to proto_max_bulk_len (1 MiB): 20 connections
// pipelining SET NX of 1 MiB keys, each sent to 5 masters, delayed
// another client's SET NX by about a second and made 60% of them fail
// NOQUORUM (docs/hardening.md). So the bytes of large commands (over
// batching.SmallCommand, 4 KiB: no lock command of a lock library comes
// near) sent and not yet answered by every master are bounded, across all
// clients; a large command past the bound is answered an error and not
// sent. Small commands are never held to it.

// MaxBigInFlight bounds the bytes of large commands that have not been
// answered by every master (fixed), each counted once though it goes to
// every master. One large command alone is always sent (a command is at
// most client_query_buffer_limit).
const MaxBigInFlight = 2 << 20

// BigInFlightError answers a large command refused at MaxBigInFlight.
type BigInFlightError struct{ Size, Max int }

func (e *BigInFlightError) Error() string {
	return fmt.Sprintf("ERR not sent: this command is %d bytes, and commands over %d bytes waiting for the masters would pass lockproxy's limit of %d bytes (fixed, across all clients: every master runs each command in order, so large ones hold up everyone's locks); retry later, and keep lock keys and values small",
		e.Size, batching.SmallCommand, e.Max)
}

// admitBig reports whether r may be sent: a small command always is; a
// large one when the large commands in flight leave room for it, or there
// are none. An admitted large command counts until every master has
// completed it (Request.Complete).
func (e *Engine) admitBig(r *Request) bool {
	n := int64(len(r.cmd))
	if n <= batching.SmallCommand || len(e.pipes) == 0 {
		return true
	}
	for {
		cur := e.big.Load()
		if cur > 0 && cur+n > MaxBigInFlight {
			e.bigRefused.Add(1)
			return false
		}
		if e.big.CompareAndSwap(cur, cur+n) {
			break
		}
	}
	r.bigBytes = n
	r.bigLeft.Store(int32(len(e.pipes)))
	return true
}

// BigRefused returns how many large commands were refused at
// MaxBigInFlight.
func (e *Engine) BigRefused() int64 { return e.bigRefused.Load() }
