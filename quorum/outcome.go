package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Outcome is how a decided operation ended, for the client's reply and for
// metrics.
type Outcome uint8

const (
	// Granted: an acquisition or extension a quorum said yes to, with
	// validity left.
	Granted Outcome = iota + 1
	// Refused: an acquisition that did not get the lock (held elsewhere, a
	// split vote, or no validity left).
	Refused
	// NotHeld: a release or extension of a lock the caller's token does
	// not hold on a quorum.
	NotHeld
	// Done: a release a quorum confirmed, or a read answered.
	Done
	// NoQuorum: fewer than a quorum of masters answered; the lock state is
	// unknown (Result's error is a *NoQuorumError).
	NoQuorum
	// Failed: an error reply (a master's) for the client.
	Failed
)

var outcomeNames = [...]string{Granted: "granted", Refused: "refused", NotHeld: "notheld", Done: "done", NoQuorum: "noquorum", Failed: "error"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcome is how r ended; r must be decided.
func (r *Request) Outcome() Outcome {
	var nq *NoQuorumError
	switch {
	case r.err != nil && asNoQuorum(r.err, &nq):
		return NoQuorum
	case r.err != nil || r.reply.Type == resp.Error:
		return Failed
	case r.agg != AggVote:
		return Done
	case r.won:
		switch r.kind {
		case Acquire, AcquireOrExtend, Extend:
			return Granted
		}
		return Done
	}
	switch r.kind {
	case Acquire, AcquireOrExtend:
		return Refused
	}
	return NotHeld
}

func asNoQuorum(err error, nq **NoQuorumError) bool {
	e, ok := err.(*NoQuorumError)
	*nq = e
	return ok
}

// Result is r's reply for the client (the script's or command's own), or
// the error it gets instead (a *NoQuorumError, whose text the proxy
// writes). r must be decided.
func (r *Request) Result() (resp.Reply, error) { return r.reply, r.err }

// Kind is what r does to its lock.
func (r *Request) Kind() Kind { return r.kind }

// Validity is how long a granted acquisition or extension is known to
// hold from its decision.
func (r *Request) Validity() time.Duration { return r.validity }

// Took is the time from parsing the command to its decision.
func (r *Request) Took() time.Duration { return time.Duration(r.decidedAt - r.t0) }

// Decided returns a request already decided with outcome o, reply and err,
// taking took from parse to decision: for tests of code that renders or
// counts outcomes (the proxy's replies and metrics).
func Decided(kind Kind, o Outcome, reply resp.Reply, err error, took time.Duration) *Request {
	r := &Request{kind: kind, agg: AggVote, reply: reply, err: err, t0: 1, decidedAt: 1 + int64(took)}
	r.won = o == Granted || o == Done
	r.done.Store(true)
	return r
}

// Command is the command every master gets for r (read only): for tests
// that check what lockproxy sends.
func (r *Request) Command() []byte { return r.cmd }
