package quorum

import (
	"errors"
	"fmt"
	"sync/atomic"

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
// near) sent to a master and not yet answered by it are bounded per
// master. A master without room is not sent the command (its vote is a
// no, as a master down's); when fewer than a quorum have room, the client
// is answered an error and nothing is sent. Small commands are never held
// to it. Counted per master, one paused or slow master (its commands stay
// unanswered) only loses its own votes on large commands.

// MaxBigInFlight bounds the bytes of large commands one master has not
// answered (fixed). One large command alone is always sent (a command is
// at most client_query_buffer_limit).
const MaxBigInFlight = 2 << 20

// errNoRoom is the vote of a master a large command was not sent to.
var errNoRoom = errors.New("not sent: this master's connection already has lockproxy's limit of large commands (over 4 KiB, 2 MiB) or of PUBLISH pattern matching waiting")

// BigInFlightError answers a large command refused at MaxBigInFlight.
type BigInFlightError struct{ Size, Max int }

func (e *BigInFlightError) Error() string {
	return fmt.Sprintf("ERR not sent: this command is %d bytes, and on too many masters the commands over %d bytes waiting would pass lockproxy's limit of %d bytes (fixed, per master: each runs its commands in order, so large ones hold up everyone's locks); retry later, and keep lock keys and values small",
		e.Size, batching.SmallCommand, e.Max)
}

// Pattern matching. Each master matches every PUBLISH's channel against
// each pattern subscribed there (lockproxy's hub subscribes its clients'
// patterns on every master), with Redis's matcher, which takes about the
// channel's length in steps per pattern that starts with a wildcard: 1000
// patterns of lockproxy's limits and 4096-byte channels made each PUBLISH
// cost each master about 34 ms, and a client publishing in a loop made
// nearly every other client's SET NX fail NOQUORUM (docs/hardening.md).
// The proxy estimates that work (Request.SetMasterWork) and bounds it per
// master as the large commands' bytes.

// MaxMatchWork bounds the pattern matching (channel bytes times patterns)
// of the PUBLISHes a master has not answered (fixed): about 5 ms of a
// master's time. A PUBLISH costing more is refused even alone.
const MaxMatchWork = 512 << 10

// smallWork is the matching work that is not counted: a lock library's
// channel (tens of bytes) against the most patterns lockproxy allows.
const smallWork = 64 << 10

// MatchWorkError answers a PUBLISH refused at MaxMatchWork.
type MatchWorkError struct{ Work, Max int64 }

func (e *MatchWorkError) Error() string {
	what := "and on too many masters the PUBLISHes waiting would pass"
	if e.Work > e.Max {
		what = "over"
	}
	return fmt.Sprintf("ERR not sent: each master would match this PUBLISH's channel against the patterns subscribed there (its length times the patterns: %d steps), %s lockproxy's limit of %d steps (fixed, per master: a master matching patterns runs no one's locks); retry later, publish on a shorter channel, or have fewer patterns subscribed (PUNSUBSCRIBE)",
		e.Work, what, e.Max)
}

// SetMasterWork records the pattern matching each master does for r, a
// PUBLISH: its channel's length times the patterns subscribed there.
// Called before Submit, by the request's owner (reqCold).
func (r *Request) SetMasterWork(steps int64) {
	if steps != 0 || r.cold != nil {
		r.coldOf().work = steps
	}
}

// admitBig returns nil when r may be sent, having counted it on the
// masters that have room for it and set the others in r.cold.bigSkip: a
// small command is not counted; a large one (or a PUBLISH whose matching
// work is counted) fits a master when what that master has not answered
// leaves room for it, or it has nothing. It returns the error r is
// answered when fewer than a quorum of masters have room. dispatch calls
// it before r is shared: it may set r.cold (reqCold).
func (e *Engine) admitBig(r *Request) error {
	n := int64(len(r.cmd))
	if n <= batching.SmallCommand {
		n = 0
	}
	var w int64
	if r.cold != nil {
		w, r.cold.work = r.cold.work, 0
	}
	if w <= smallWork {
		w = 0
	}
	if (n == 0 && w == 0) || len(e.big) == 0 {
		return nil
	}
	if w > MaxMatchWork {
		e.workRefused.Add(1)
		return &MatchWorkError{Work: w, Max: MaxMatchWork}
	}
	var skip uint64
	room := 0
	for i := range e.big {
		if !reserve(&e.big[i], n, MaxBigInFlight) {
			skip |= 1 << i
			continue
		}
		if !reserve(&e.work[i], w, MaxMatchWork) {
			e.big[i].Add(-n)
			skip |= 1 << i
			continue
		}
		room++
	}
	if room < e.q {
		for i := range e.big {
			if skip&(1<<i) == 0 {
				e.big[i].Add(-n)
				e.work[i].Add(-w)
			}
		}
		if w > 0 {
			e.workRefused.Add(1)
			return &MatchWorkError{Work: w, Max: MaxMatchWork}
		}
		e.bigRefused.Add(1)
		return &BigInFlightError{Size: len(r.cmd), Max: MaxBigInFlight}
	}
	c := r.coldOf() // r is not shared yet (dispatch): see reqCold
	c.bigBytes, c.work, c.bigSkip, r.bigHeld = n, w, skip, true
	return nil
}

// reserve adds n to *c unless that passes max while *c is not 0.
func reserve(c *atomic.Int64, n, max int64) bool {
	if n == 0 {
		return true
	}
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
