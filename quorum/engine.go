// Package quorum is lockproxy's Redlock engine: it builds each lock
// operation's master commands (ops.go), sends them to every master through
// its batching pipeline, counts votes, decides as soon as the outcome is
// certain or at the deadline it keeps itself, accounts validity on the
// monotonic clock, and undoes failed acquisitions where they wrote. It
// knows nothing of RESP clients: the proxy calls one constructor per
// client command and renders the typed outcome (Outcome, Result).
package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// pipe is what the engine needs of a master's pipeline
// (*batching.Pipeline); tests put a fake in its place.
type pipe interface {
	Submit(batching.Op) error
	Up() (bool, error)
	Depth() (queued, inflight int)
	Stalled(now int64) time.Duration
	Addr() string
	Close()
}

var _ pipe = (*batching.Pipeline)(nil)

// Engine runs quorum operations over the masters.
type Engine struct {
	cfg   Config
	n, q  int
	pipes []pipe
	keys  keyTable
	slots keySlots    // failed acquisitions waiting for late replies, by key (keygen.go)
	loads scriptLoads // understood scripts loaded on each master (load.go)
	init  [][]byte    // the pipelines' Init: lockproxy's and the catalog's scripts
	// quarantine[i] is the unix time in ms until which master i's votes do
	// not count (it lost its data and may have lost keys of valid locks);
	// 0: none. Commands are still sent to it, so its state rebuilds.
	quarantine []atomic.Int64
	qwhy       []atomic.Uint32          // Why, per master, of its quarantine
	barred     []atomic.Uint32          // bar flags, per master: votes that do not count whatever the quarantine
	policies   []atomic.Pointer[string] // maxmemory-policy last read, for the bar's message
	checkErrs  []atomic.Pointer[string] // the last failed check's error, for the stale bar's message
	// refusedVersion[i]: the version master i was last refused for
	// (version.go), so that each is logged once; nil: none.
	refusedVersion []atomic.Pointer[string]
	qmon           *monitor
	timers         *deadlines   // decides requests whose masters missed the deadline
	undos          atomic.Int64 // undo commands sent
	lost           atomic.Int64 // undo commands that could not be queued
	// unconfirmed counts masters whose part of a failed acquisition is
	// unknown for good (connection broken after sending): not undone.
	unconfirmed atomic.Int64
	retries     atomic.Int64   // split votes retried (retry.go)
	big         []atomic.Int64 // per master: bytes of large commands it has not answered (big.go)
	work        []atomic.Int64 // per master: pattern matching of the PUBLISHes it has not answered
	bigRefused  atomic.Int64   // large commands refused at MaxBigInFlight
	workRefused atomic.Int64   // PUBLISHes refused at MaxMatchWork
	// repairs[i]: master i lost its data and its counters are not restored
	// yet; its replies do not count for counters (counter.go, repair.go).
	repairs [MaxMasters]atomic.Bool
	// shortLogged[i]: when master i's short copy was last logged
	// (shortCopy), unix ms; at most one warning a minute per master.
	shortLogged [MaxMasters]atomic.Int64
	// noRepair, set by tests, ignores repair records: a master that lost
	// its data votes on counters as soon as on locks, with nothing restored
	// (the negative control of the repair's test: counters then go back).
	noRepair atomic.Bool
	loop     *evloop.Loop // nil: goroutine per connection
	ownLoop  bool         // the Engine started loop and closes it
}

// New starts an Engine; the masters are connected in the background and
// unreachable ones are retried, so New does not fail on them.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, n: len(cfg.Masters), q: Size(len(cfg.Masters)), loop: cfg.Loop}
	if e.loop == nil && !cfg.NoEventLoop && evloop.Supported {
		l, err := evloop.New(cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("quorum: starting the event loop: %w", err)
		}
		e.loop, e.ownLoop = l, true
	}
	e.quarantine = make([]atomic.Int64, e.n)
	e.big, e.work = make([]atomic.Int64, e.n), make([]atomic.Int64, e.n)
	e.qwhy = make([]atomic.Uint32, e.n)
	e.barred = make([]atomic.Uint32, e.n)
	e.policies = make([]atomic.Pointer[string], e.n)
	e.checkErrs = make([]atomic.Pointer[string], e.n)
	e.refusedVersion = make([]atomic.Pointer[string], e.n)
	e.keys.init()
	e.slots.init(e.keys.seed)
	bound := cfg.UnderstoodPerMaster
	if bound <= 0 {
		bound = MaxUnderstoodPerMaster
	}
	e.loads.init(e.n, bound)
	var err error
	if e.timers, err = newDeadlines(e.loop); err != nil {
		return nil, fmt.Errorf("quorum: starting the deadline timer: %w", err)
	}
	var init [][]byte
	for _, s := range InternalScripts() {
		init = append(init, ScriptLoad(s.Body))
	}
	for _, s := range cfg.Scripts {
		init = append(init, ScriptLoad(s))
	}
	e.init = init
	e.qmon = newMonitor(e)
	onState := e.qmon.onState(func(i int, up bool, err error) {
		if up {
			e.loads.reconnected(i)
		}
		if f := cfg.OnMasterState; f != nil {
			f(i, up, err)
		}
	})
	for i, addr := range cfg.Masters {
		e.pipes = append(e.pipes, batching.New(batching.Options{
			Addr:         addr,
			Index:        i,
			QueueLimit:   cfg.QueueLimit,
			Dial:         cfg.Dial,
			Username:     cfg.MasterUsername,
			Password:     cfg.MasterPassword,
			Init:         init,
			CheckVersion: e.checkVersion,
			OnState:      onState,
			OnBatch:      cfg.OnBatch,
			OnReply:      cfg.OnReply,
			Loop:         e.loop,
			Logger:       cfg.Logger,
		}))
	}
	e.qmon.start()
	return e, nil
}

// Loop is the event loop that drives the connections, nil when there is
// none (goroutine per connection).
func (e *Engine) Loop() *evloop.Loop { return e.loop }

// N is the number of masters, Q the quorum.
func (e *Engine) N() int { return e.n }
func (e *Engine) Q() int { return e.q }

// Config returns the validated configuration.
func (e *Engine) Config() Config { return e.cfg }

// Masters reports each master's state without a round trip.
func (e *Engine) Masters() []MasterStatus {
	out := make([]MasterStatus, e.n)
	for i, p := range e.pipes {
		up, err := p.Up()
		q, f := p.Depth()
		out[i] = MasterStatus{Addr: p.Addr(), Up: up, Err: err, Queued: q, Inflight: f}
		if v, ok := p.(versioned); ok {
			out[i].Server = v.Version()
		}
		out[i].QuarantinedUntil, _ = e.QuarantinedUntil(i)
		if !out[i].QuarantinedUntil.IsZero() {
			out[i].QuarantineWhy, _ = e.quarantineWhy(i)
		}
		switch err := e.noVote(i).(type) {
		case *EvictionError, *StaleError:
			out[i].Excluded = err.Error()
		case *QuarantineError:
			if err.Until.IsZero() {
				out[i].Excluded = err.Error() // its quarantine's end, awaiting the check
			}
		}
		if up {
			out[i].Err = nil
		}
		out[i].CountersPending = e.repairs[i].Load()
	}
	return out
}

// UndoStats returns how many undo commands were queued, how many could not
// be (master down or queue full: the key then expires by its TTL), and on
// how many masters a failed acquisition's outcome stayed unknown (the
// connection broke before the reply), so that nothing was undone there.
func (e *Engine) UndoStats() (sent, lost, unconfirmed int64) {
	return e.undos.Load(), e.lost.Load(), e.unconfirmed.Load()
}

// Retries returns how many split votes were retried (retry.go).
func (e *Engine) Retries() int64 { return e.retries.Load() }

// Submit starts r on behalf of w's connection. The outcome is available in
// r once w.Wait returns.
func (e *Engine) Submit(w *Waiter, r *Request) {
	r.e, r.w = e, w
	r.refs.Store(1) // the submitter's, until Release
	w.pending.Add(1)
	if r.t0 == 0 {
		// Not from a client's command (lockproxy's own reads): its
		// time starts now, before it may wait behind its key, for
		// node_timeout, validity and the ageing of TTL readings (qthTTL).
		r.t0 = batching.Now()
	}
	if r.Key != "" {
		r.kh, r.khSet = e.keys.hash(r.Key), true
		switch e.keys.enter(r) {
		case queued:
			return // behind another request on the same key
		case queueFull:
			r.answerQueued(resp.Reply{}, &KeyQueueFullError{Max: maxKeyQueue})
			return
		}
	}
	now := r.t0 // parsed just now: saves a clock read, and counts node_timeout from the parse
	if e.dispatch(r, now) {
		e.finish(r)
	}
}

// dispatch sends r to every master at now. It returns true when r was
// decided before dispatch returned (a master down, validity already gone…);
// the caller then finishes it.
func (e *Engine) dispatch(r *Request, now int64) bool {
	timeout := e.cfg.NodeTimeout
	if r.TTL > 0 {
		left := Validity(r.TTL, time.Duration(now-r.t0), e.cfg.DriftFactor)
		if left <= 0 {
			// It waited too long behind its key: nothing to send. The
			// client hears so, not "not acquired" (or "not extended"),
			// which would say the key is held, maybe free all along.
			r.mu.Lock()
			if r.parent() == nil {
				r.err = &QueuedPastValidityError{Waited: time.Duration(now - r.t0), TTL: r.TTL}
			} else {
				r.reply = r.lostReply() // a split vote's retry: the vote was lost
			}
			r.decidedIn = true
			r.mu.Unlock()
			return true
		}
		timeout = min(timeout, left)
	}
	if err := e.admitBig(r); err != nil {
		r.mu.Lock()
		r.err = err
		r.decidedIn = true
		r.mu.Unlock()
		return true
	}
	dl := now + int64(timeout)
	r.mu.Lock()
	r.inDispatch = true
	r.shortDL = timeout < e.cfg.NodeTimeout
	r.prepareVote()
	r.mu.Unlock()
	// supersede before the deadline's entry: until then no other
	// goroutine sees r, so supersede may still set r.cold (reqCold).
	e.supersede(r)
	r.deadline.Store(dl) // after inDispatch: an expiry now is finished by us
	e.timers.push(r, dl)
	opDeadline := dl
	if r.kind == Release || (r.kind == Counter && r.agg == AggVote) || r.agg == AggEach {
		// A release still frees the key on a master that gets it after
		// the vote was decided, instead of leaving it there until its
		// TTL: it is written however late (queue_limit still bounds a
		// stalled master's queue). A counter's write (only ever up)
		// still brings a lagging master closer to the others. An AggEach
		// command still does what it was sent for: a client's PUBLISH
		// reaches the subscribers, as on one Redis (dropped unwritten it
		// reached none, and a waiter slept through a release's message),
		// a repush gives the list its element back.
		opDeadline = 0
	}
	acquire := r.kind == Acquire || r.kind == AcquireOrExtend
	// One reference per master, each dropped by that master's Complete
	// (which may run at once on the loop): taken with one atomic add, not
	// one per master, as this runs for every request.
	r.refs.Add(int32(len(e.pipes)))
	skip, bigSkip := r.skip(), r.bigSkip() // r.cold's, fixed by now (reqCold)
	for i, p := range e.pipes {
		if skip&(1<<i) != 0 {
			why := errSkipped
			if p := r.parent(); p != nil && p.cont == contRaise {
				why = errNotRenewed
			}
			r.Complete(i, resp.Reply{}, &notSentError{why})
			continue
		}
		if bigSkip&(1<<i) != 0 {
			// No room on this master's connection for another large
			// command (big.go): its vote is a no, as if it were down.
			r.Complete(i, resp.Reply{}, &notSentError{errNoRoom})
			continue
		}
		if acquire && p.Stalled(now) > e.cfg.NodeTimeout {
			// A master that has left a command unanswered for longer
			// than node_timeout (paused, overloaded) would only make
			// this acquisition wait for its deadline, and write a token
			// there later that needs a late undo: with contenders, a
			// split vote then cannot be settled until node_timeout, and
			// the left-over tokens refuse others. It is not sent; its
			// vote is a no, as it would be at the deadline.
			r.Complete(i, resp.Reply{}, &notSentError{&StalledError{For: p.Stalled(now)}})
			continue
		}
		if err := e.submitLoaded(i, r, batching.Op{Cmd: r.cmd, Deadline: opDeadline, C: r}); err != nil {
			r.Complete(i, resp.Reply{}, &notSentError{err})
		}
	}
	r.mu.Lock()
	r.inDispatch = false
	decided := r.decidedIn && !r.retrying
	retry := r.takeRetry()
	r.mu.Unlock()
	if retry {
		e.scheduleRetry(r)
	}
	return decided
}

// StalledError is the vote of a master an acquisition was not sent to: it
// had left a command unanswered for longer than node_timeout.
type StalledError struct{ For time.Duration }

func (e *StalledError) Error() string {
	return fmt.Sprintf("not asked: it has not answered for %v (paused or overloaded)", e.For.Round(time.Millisecond))
}

// decided is called once, by whoever decided r outside dispatch.
func (e *Engine) decided(r *Request) {
	if r.parent() != nil {
		e.adopt(r)
		return
	}
	e.finish(r)
}

// finish publishes r's outcome and lets the next request on its key go.
// Requests decided synchronously while dispatching are finished here in a
// loop, not by recursion, so a long queue on a hot key cannot grow the
// stack.
func (e *Engine) finish(r *Request) {
	for {
		// Once signalled, r's submitter may Release it: hold r while its
		// outcome decides the fate of the requests queued on its key.
		r.ref()
		decidedAt := batching.Now()
		r.decidedAt = decidedAt
		r.done.Store(true)
		holder := r // the request whose outcome is the key's current state
		r.w.signal()
		if holder.Key == "" {
			holder.unref()
			return
		}
		for {
			next := e.keys.leave(holder.kh, holder.Key)
			if next == nil {
				holder.unref()
				return
			}
			if next.w.abandoned() && next.skippable() {
				// Its client hung up while it waited: nobody reads its
				// outcome, and not running it changes nothing.
				next.answerQueued(resp.Reply{}, ErrClientGone)
				continue
			}
			if next.exclusive && holder.exclusive && (holder.contended || holder.validity > time.Duration(batching.Now()-decidedAt)) {
				// A plain SET NX queued while a SET NX on its key was in
				// flight, which found the key held (a quorum refused it, or
				// it took the lock and is still valid): the two were
				// concurrent, so next is ordered right after it and is
				// refused too, without a round trip. Only requests that
				// waited behind it are answered so; later ones ask the
				// masters.
				next.answerQueued(next.noReply(), nil)
				continue
			}
			if nq := (*NoQuorumError)(nil); next.exclusive && holder.exclusive && errors.As(holder.err, &nq) {
				// Likewise a plain SET NX queued behind one that got
				// NOQUORUM gets that answer: the masters that missed it
				// are no likelier to answer next, and a hot key must not
				// make each queued client wait node_timeout in turn (32
				// clients, 3 of 5 masters paused: 32 x node_timeout).
				next.answerQueued(resp.Reply{}, holder.err)
				continue
			}
			if e.dispatch(next, batching.Now()) {
				holder.unref()
				r = next
				break // finish next, then carry on with its key
			}
			// next is in flight; its decision (or its deadline, which the
			// engine keeps) continues the chain.
			holder.unref()
			return
		}
	}
}

// answerQueued decides a request that waited behind its key without
// sending it to the masters, and publishes the outcome.
func (r *Request) answerQueued(rep resp.Reply, err error) {
	r.mu.Lock()
	r.reply, r.err = rep, err
	r.decidedIn = true
	r.mu.Unlock()
	r.decidedAt = batching.Now()
	r.done.Store(true)
	r.w.signal()
}

// submitUndo queues an undo on master i, fire and forget.
func (e *Engine) submitUndo(i int, cmd []byte) {
	if err := e.pipes[i].Submit(batching.Op{Cmd: cmd}); err != nil {
		e.lost.Add(1)
		e.cfg.Logger.Debug("undo not queued; the key expires by its TTL", "master", e.cfg.Masters[i], "err", err)
		return
	}
	e.undos.Add(1)
}

// Drain waits until every master's queue is written and answered (undos
// included), or ctx ends. Used at shutdown, after the clients are served.
func (e *Engine) Drain(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		busy := false
		for _, p := range e.pipes {
			if up, _ := p.Up(); !up {
				continue
			}
			if q, f := p.Depth(); q+f > 0 {
				busy = true
			}
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close closes the master connections.
func (e *Engine) Close() {
	if e.qmon != nil { // nil in tests' fake engines
		e.qmon.stop()
	}
	for _, p := range e.pipes {
		p.Close()
	}
	if e.timers != nil {
		e.timers.close()
	}
	if e.ownLoop {
		e.loop.Close()
	}
}
