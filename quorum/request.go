package quorum

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Agg says how the masters' replies to a request combine into one.
type Agg uint8

const (
	// AggVote counts yes votes by Rule (locks: acquire, release, extend).
	AggVote Agg = iota
	// AggValue answers the bulk value a quorum holds, else nil; or, for a
	// counter, the maximum (GET, counter.go). Replies are [value, pttl]
	// pairs.
	AggValue
	// AggValueTTL answers the conservative remaining PTTL of the value a
	// quorum holds, else -2 (PTTL/TTL); replies are [value, pttl] pairs.
	AggValueTTL
	// AggValuePTTL answers both as one [value, PTTL] pair, [nil, -2] when
	// no quorum holds a value (a script returning {GET k, PTTL k}, as
	// redlock-rb reads a lock); replies are [value, pttl] pairs.
	AggValuePTTL
	// AggKeys answers how many keys a quorum reported 1 for; replies are
	// arrays with one integer per key (EXISTS, DEL).
	AggKeys
	// AggEach is no vote: every master's integer reply is kept, until all
	// answered or the deadline (a client's PUBLISH: Replies); with no
	// integer reply at all, the masters' error or NOQUORUM (eachOutcome).
	AggEach
	// AggCounter answers the maximum a quorum of counter voters holds,
	// plus the increment, once written (counter.go); replies are [value,
	// pttl] pairs.
	AggCounter
	// AggPop answers an element any master popped (pop.go); replies are
	// {key, element, pttl, left} or nil, the answer {key, element}.
	AggPop
)

// Request is one client command turned into a quorum operation. The proxy
// fills the exported fields before Submit and reads the outcome after the
// Waiter returns; the engine owns it in between.
type Request struct {
	// The first line: everything a master's reply reads and writes, up
	// to the decision and after it, for the common operations (SET NX and
	// the scripts without check or re-entrant counts). Requests are
	// 64-byte aligned by their size class; under load, with hundreds in
	// flight, each line of a request a reply touches is a cache miss, and
	// the per-master cost is mostly these misses. So every Complete of
	// such a request touches this line and no other of r (the common
	// replies are not copied into it either: rk, replies.go); a reply
	// after a lost vote's decision adds its late-undo record's. e is set
	// by Submit, kind and agg by the operation's constructor (ops.go), and
	// do not change after; refs is atomic, never under mu.
	mu         sync.Mutex // protects the vote's fields, supLeft and cold.sups, ext, undoCmd
	e          *Engine
	refs       atomic.Int32 // the submitter's, one per op sent, finish's (see Release)
	answered   int32        // masters whose reply counts
	failed     int32        // masters whose vote will not count (error, timeout, down, quarantined)
	yes        int32
	state      [MaxMasters]uint8
	rk         [MaxMasters]uint8 // per master: its reply when a common one, and whether it is a yes (replies.go)
	supLeft    uint16            // see reqCold.sups
	inDispatch bool              // decided while dispatch was still submitting
	decidedIn  bool
	undoing    bool // a failed acquisition: undo each master once its part is known
	retrying   bool // a split vote: decided to try once more (retry.go) instead of publishing
	kind       Kind
	agg        Agg
	// bigHeld: r counts against its masters' Engine.big and Engine.work
	// (big.go), which each Complete gives back.
	bigHeld bool
	// fast: what dispatch found of rule, chk and reent, so that a reply
	// need not read them (replies.go).
	fast uint8
	// nilIsNoop marks commands whose nil reply proves the master changed
	// nothing (SET NX): no undo is sent to masters that answered nil.
	nilIsNoop bool
	// noIsNoop marks acquisitions whose every reply that is neither a yes
	// nor an error proves the master changed nothing (acquire scripts that
	// return before writing): no undo is sent to masters that answered so.
	noIsNoop bool
	// shortenOn: a granted extend's shorter TTL goes to each master once
	// it answered (shorten.go).
	shortenOn bool

	// What the operation's rule, checks and counts need; set by its
	// constructor (ops.go) and not changed after.
	rule  *VoteRule // AggVote: which reply is a yes
	nkeys int       // keys the command names (YesNumKeys, AggKeys)
	// reent: a re-entrant hash lock's acquisition, whose masters also
	// answer the token's count (reentrant.go); chk: a checked script's
	// masters' reports (check.go); nil otherwise.
	reent   *reentState
	chk     *checkState
	shortDL bool // the deadline is the validity left, shorter than node_timeout
	retried bool // this is the retry of a split vote: no further retry
	retryGo bool // the retry was handed to its timer
	undoOp  UndoOp
	// pttlAt: where no replies carry the holder's PTTL: 0 nowhere, 1 the
	// reply, i+1 the array's i-th element. On this line, which a lost
	// vote's decision reads anyway (rule, undoOp).
	pttlAt  int32
	undoCmd []byte // built on first use

	// ext: the masters' replies other than the common ones rk holds, and
	// why a master's vote did not count; allocated on first use and kept
	// with a pooled Request (replies.go).
	ext *reqExt
	// cold: what only uncommon requests set (cold.go); allocated on first
	// use, before r is shared, and kept with a pooled Request.
	cold      *reqCold
	extDirty  bool // ext was written since the Request was last recycled
	coldDirty bool // cold was written since the Request was last recycled

	// What the operation is; set by its constructor (ops.go).
	combine Combine // AggVote: which reply the client gets on success
	// deletedYes: a release's yes reply where it deleted the lock, when
	// other yes replies say a count is left or come from masters without
	// the lock (ScriptOp.DeletedYes, AbsentYes), that reply's rk kind; 0:
	// none (releaseYes).
	deletedYes uint8
	// exclusive marks a plain SET NX: it cannot succeed while another
	// acquisition of the key from this process holds validity, so queued
	// behind one that succeeded it is answered "not acquired" at once.
	exclusive bool
	// shorten: a granted extend sets its TTL on the masters afterwards
	// (shorten.go); the extend itself never lowers one.
	shorten byte
	// noRk: the reply when the vote is lost and no master said otherwise
	// (noReply), as an rk kind (replies.go); rkExt: r.cold's, or none.
	noRk  uint8
	khSet bool // kh is set (Submit sets it for every keyed request)
	// Key serializes the request behind others on the same key from this
	// process (at most one quorum attempt per key in flight); "" = none.
	Key string
	kh  uint64 // Key's hash, for the key table and the late-undo slots
	cmd []byte // the command every master gets
	// undoKeys, undoToken and undoOp describe the compensating command of
	// an acquisition, built only when it fails and sent to every master
	// where it wrote. They may alias cmd.
	undoKeys  [][]byte
	undoToken []byte
	// token is the lock token this operation writes or checks, when known
	// (supersede.go); nil: unknown, it may write any.
	token   []byte
	TTL     time.Duration // validity accounting for Acquire/Extend; 0: none
	t0      int64         // batching.Now() when the command was parsed
	undoKey [1][]byte     // OneUndoKey's storage: undoKeys of a single key, next to them

	// deadline: batching.Now() deadline, set at dispatch; here so that
	// reply starts a cache line (TestRequestLayout).
	deadline atomic.Int64

	// Outcome, valid once decided (Outcome, Result), and what the
	// decision and its publication touch besides (the waiter, the
	// deadline's entry, the late-undo record): together, so that
	// deciding a request and rendering its outcome touch as few of its
	// lines as they can.
	reply     resp.Reply
	err       error         // *NoQuorumError or another error for the client
	validity  time.Duration // Acquire/Extend: remaining validity at decision
	decidedAt int64         // batching.Now() when the outcome was published
	w         *Waiter
	dlSeq     int64       // its deadline entry's sequence number + 1; 0: none to cancel (under deadlines.mu)
	done      atomic.Bool // decided
	// contended: a quorum answered and refused (the key is held); set
	// before the decision is published.
	contended bool
	// won: a quorum said yes (with validity left, for timed kinds).
	won bool
	// A failed acquisition waiting for late replies is registered on a
	// slot (keygen.go); a later write of its token marks it superseded
	// (supersede.go, sup). Both under its home slot's lock.
	slot *keySlot
	home *keySlot // the slot r was registered on, kept after it leaves (resolveSups)
	sup  *supState

	buf    []byte   // CmdBuffer's storage, kept when recycled
	next   *Request // per-key FIFO link
	pooled bool     // from NewRequest: back to the pool when refs reach 0
	// Counters (counter.go): ctr is a counter operation's state;
	// notCounter the masters whose replies to a GET count for a lock read
	// only; cont what r continues with instead of publishing. These may
	// be set while r is in flight, under r.mu: not in r.cold (reqCold).
	notCounter uint16
	cont       uint8
	// hashRead: an HGET or HEXISTS of a hash lock's field (hashread.go).
	hashRead uint8
	ctr      *counterState
}

// Per-master state of a request. The undo of a failed acquisition depends
// on it: only a reply says whether the master applied the command.
const (
	pending    uint8 = iota
	replied          // a reply arrived in time and counts as a vote
	ignored          // a reply arrived but is no vote (quarantined master, or after the deadline); it still says what the master did
	timedOut         // sent, no reply by the deadline: it may still arrive (then ignored)
	lost             // sent, and no reply will come (connection broken): applied or not is unknown
	notApplied       // never reached the master, or refused unapplied (LOADING, BUSY…)
)

// Decided reports whether the outcome is known.
func (r *Request) Decided() bool { return r.done.Load() }

// Complete implements batching.Completer: one master's reply or failure.
// Each op dispatch sends holds a reference to r, which this drops.
func (r *Request) Complete(master int, rep resp.Reply, err error) {
	r.complete(master, rep, err)
	if r.bigHeld && r.cold.bigSkip&(1<<master) == 0 { // bigHeld: admitBig set r.cold
		r.e.big[master].Add(-r.cold.bigBytes)
		r.e.work[master].Add(-r.cold.work)
	}
	r.unref()
}

func (r *Request) complete(master int, rep resp.Reply, err error) {
	r.mu.Lock()
	if err == nil && r.mayBeSpecial() {
		if r.chk != nil {
			r.unwrapCheck(master, &rep)
		}
		if r.reent != nil {
			r.unwrapReentrant(master, &rep)
		}
	}
	switch r.state[master] {
	case pending:
	case timedOut:
		r.late(master, rep, err)
		r.mu.Unlock()
		return
	default:
		r.mu.Unlock()
		return
	}
	if err == nil && unavailable(rep) {
		if op := r.load(); op != nil && noScript(&rep) {
			r.e.loads.forget(master, op.SHA1)
		}
		err = &refusedError{msg: string(rep.Str)}
	}
	var quarantined error
	if err == nil && (r.e.quarantine[master].Load() != 0 || r.e.barred[master].Load() != 0 || r.e.repairs[master].Load()) {
		quarantined = r.voteErr(master)
	}
	switch {
	case err != nil:
		var refused *refusedError
		var unsent *notSentError
		if errors.Is(err, batching.ErrExpired) || errors.Is(err, batching.ErrQueueFull) || errors.As(err, &refused) || errors.As(err, &unsent) {
			r.state[master] = notApplied
		} else {
			r.state[master] = lost
		}
		r.miss(master, err)
	case quarantined != nil:
		// Not a vote, but the reply still tells the undo what the
		// master did.
		r.state[master] = ignored
		k := rkOf(&rep)
		r.putReply(master, &rep, k, r.voteOf(master, &rep, k))
		r.miss(master, quarantined)
	default:
		r.state[master] = replied
		k := rkOf(&rep)
		yes := r.voteOf(master, &rep, k)
		r.putReply(master, &rep, k, yes)
		r.answered++
		if yes {
			r.yes++
		}
	}
	r.resolveSups(master)
	if r.decidedIn {
		if r.undoing {
			r.undoLate(master)
		}
		r.shortenLate(master)
		r.mu.Unlock()
		return
	}
	decided := r.tryDecide(false)
	retry := r.takeRetry()
	decidedNow := r.decidedIn
	r.mu.Unlock()
	switch {
	case decided:
		r.e.decided(r)
	case retry:
		r.e.scheduleRetry(r)
	}
	if decidedNow {
		r.settle()
	}
}

// miss records that master's vote will not count. r.mu is held.
func (r *Request) miss(master int, err error) {
	r.extOf().errs[master] = err
	r.failed++
	if f := r.e.cfg.OnMiss; f != nil {
		f(master, missKind(err))
	}
}

// late takes the reply of a master that missed the deadline: no vote any
// more, but it says whether the master applied the command, which the undo
// of a failed acquisition waits for. r.mu is held.
func (r *Request) late(master int, rep resp.Reply, err error) {
	switch {
	case err != nil && (errors.Is(err, batching.ErrExpired) || errors.Is(err, batching.ErrQueueFull)):
		r.state[master] = notApplied
	case err != nil:
		r.state[master] = lost
	case unavailable(rep):
		r.state[master] = notApplied
	default:
		r.state[master] = ignored
		k := rkOf(&rep)
		r.putReply(master, &rep, k, r.voteOf(master, &rep, k))
	}
	r.resolveSups(master)
	if r.undoing {
		r.undoLate(master)
	}
	r.shortenLate(master)
}

// refusedError is an error reply that says the master did not run the
// command (LOADING, BUSY…): no vote, and nothing to undo there.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// notSentError is a command the master's pipeline did not accept (down,
// closed): nothing to undo there.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// unavailable reports error replies that say the master cannot serve now;
// they count as no answer, not as a vote.
func unavailable(rep resp.Reply) bool {
	if rep.Type != resp.Error {
		return false
	}
	for _, p := range [...]string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "NOSCRIPT", "OOM", "MISCONF", "NOAUTH", "NOPERM"} {
		if bytes.HasPrefix(rep.Str, []byte(p)) {
			return true
		}
	}
	return false
}

// expire marks masters that have not answered by the deadline as failed
// and decides.
func (r *Request) expire() {
	if r.done.Load() {
		return // decided long ago, as almost every request is by its deadline
	}
	r.mu.Lock()
	if r.decidedIn {
		r.mu.Unlock()
		return
	}
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == pending {
			// Its reply may still come, and says whether the master
			// applied the command (late).
			r.state[i] = timedOut
			r.extOf().errs[i] = ErrNodeTimeout
			if r.shortDL {
				r.ext.errs[i] = ErrValidityTimeout
			}
			if f := r.e.cfg.OnMiss; f != nil {
				f(i, MissTimeout)
			}
			r.failed++
		}
	}
	decided := r.tryDecide(true)
	retry := r.takeRetry()
	r.mu.Unlock()
	switch {
	case decided:
		r.e.decided(r)
	case retry:
		r.e.scheduleRetry(r)
	}
}

// ErrNodeTimeout is a master that did not answer within node_timeout.
var ErrNodeTimeout = errors.New("no reply within node_timeout")

// ErrValidityTimeout is a master that did not answer before the lock's
// validity ran out, sooner than node_timeout (a TTL of a few ms).
var ErrValidityTimeout = errors.New("no reply before the lock's validity (TTL minus the clock drift allowance) ran out")

// unwrapMaster strips what only says which master failed: the failure
// names its master itself.
func unwrapMaster(err error) error {
	var ns *notSentError
	if errors.As(err, &ns) {
		err = ns.err
	}
	var me *batching.MasterError
	if errors.As(err, &me) {
		return me.Err
	}
	return err
}

// Miss says why a master's vote did not count, for metrics.
type Miss uint8

const (
	MissTimeout     Miss = iota // no reply within node_timeout
	MissUnavailable             // connection down, queue full, expired before written, LOADING/BUSY…
	MissQuarantined             // the master's votes do not count yet
	MissExcluded                // it may evict keys, or could not be checked for too long
)

func missKind(err error) Miss {
	var q *QuarantineError
	var ev *EvictionError
	switch {
	case errors.As(err, &q):
		return MissQuarantined
	case errors.As(err, &ev), errors.As(err, new(*StaleError)):
		return MissExcluded
	case errors.Is(err, ErrRepairPending):
		return MissQuarantined
	}
	return MissUnavailable
}
