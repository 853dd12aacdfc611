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

// Pattern matching. Each master matches every PUBLISH's channel against
// each pattern subscribed there (lockproxy's hub subscribes its clients'
// patterns on every master), with Redis's matcher, which takes about the
// channel's length in steps per pattern that starts with a wildcard: 1000
// patterns of lockproxy's limits and 4096-byte channels made each PUBLISH
// cost each master about 34 ms, and a client publishing in a loop made
// 122 of 123 other clients' SET NX fail NOQUORUM (docs/hardening.md). The
// proxy estimates that work (Request.SetMasterWork) and bounds it across
// all clients.

// MaxMatchWork bounds the pattern matching (channel bytes times patterns)
// of the PUBLISHes not yet answered by every master (fixed): about 5 ms
// of a master's time. A PUBLISH costing more is refused even alone.
const MaxMatchWork = 512 << 10

// smallWork is the matching work that is not counted: a lock library's
// channel (tens of bytes) against the most patterns lockproxy allows.
const smallWork = 64 << 10

// MatchWorkError answers a PUBLISH refused at MaxMatchWork.
type MatchWorkError struct{ Work, Max int64 }

func (e *MatchWorkError) Error() string {
	what := "and the PUBLISHes waiting for the masters would pass"
	if e.Work > e.Max {
		what = "over"
	}
	return fmt.Sprintf("ERR not sent: each master would match this PUBLISH's channel against the patterns subscribed there (its length times the patterns: %d steps), %s lockproxy's limit of %d steps (fixed, across all clients: a master matching patterns runs no one's locks); retry later, publish on a shorter channel, or have fewer patterns subscribed (PUNSUBSCRIBE)",
		e.Work, what, e.Max)
}

// SetMasterWork records the pattern matching each master does for r, a
// PUBLISH: its channel's length times the patterns subscribed there.
func (r *Request) SetMasterWork(steps int64) { r.work = steps }

// admitBig returns nil when r may be sent: a small command always is; a
// large one when the large commands in flight leave room for it, or there
// are none; a PUBLISH whose matching work is counted when the work in
// flight leaves room for it. What it admits counts until every master has
// completed r (Request.Complete). Otherwise it returns the error r is
// answered.
func (e *Engine) admitBig(r *Request) error {
	if len(e.pipes) == 0 {
		return nil
	}
	n := int64(len(r.cmd))
	if n <= batching.SmallCommand {
		n = 0
	}
	w := r.work
	if w <= smallWork {
		w = 0
	}
	r.work = 0
	if n == 0 && w == 0 {
		return nil
	}
	if w > MaxMatchWork {
		e.workRefused.Add(1)
		return &MatchWorkError{Work: w, Max: MaxMatchWork}
	}
	if w > 0 && !reserve(&e.work, w, MaxMatchWork) {
		e.workRefused.Add(1)
		return &MatchWorkError{Work: w, Max: MaxMatchWork}
	}
	if n > 0 && !reserve(&e.big, n, MaxBigInFlight) {
		e.work.Add(-w)
		e.bigRefused.Add(1)
		return &BigInFlightError{Size: len(r.cmd), Max: MaxBigInFlight}
	}
	r.bigBytes, r.work = n, w
	r.bigLeft.Store(int32(len(e.pipes)))
	return nil
}

// reserve adds n to *c unless that passes max while *c is not 0.
func reserve(c interface {
	Load() int64
	CompareAndSwap(old, new int64) bool
}, n, max int64) bool {
	for {
		cur := c.Load()
		if cur > 0 && cur+n > max {
			return false
		}
		if c.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// BigRefused returns how many large commands were refused at
// MaxBigInFlight.
func (e *Engine) BigRefused() int64 { return e.bigRefused.Load() }

// MatchWorkRefused returns how many PUBLISHes were refused at
// MaxMatchWork.
func (e *Engine) MatchWorkRefused() int64 { return e.workRefused.Load() }
