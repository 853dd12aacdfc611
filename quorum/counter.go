package quorum

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Counters: a max-register over the masters, for fencing tokens
// (docs/fencing.md has the argument; this is the mechanism).
//
// INCRBY key n reads the key on every master (counterReadScript), takes
// the maximum M over a quorum of masters that vote on counters, writes M+n
// to every master with counterWriteScript (set if greater) and answers M+n
// once a quorum has acknowledged the write. Values only grow on a master,
// so a value acknowledged by a quorum is held, or exceeded, by a quorum,
// which every later read quorum meets: a caller that starts after another
// was answered gets a strictly greater value. Concurrent callers may get
// equal values.
//
// A master that lost its data (restart quarantine) holds low values, or
// none, for ever: counters do not expire. It votes on counters only once
// lockproxy restored every registered counter on it (repair.go); until
// then its replies count for locks (after the quarantine) but not here.
// Once restored it votes on counters even while its quarantine lasts,
// which only waits for the locks it lost to expire (noCounterVote).
//
// Each phase is its own request: the read is the one the client submitted;
// its write is a child (continueWith) whose outcome the read adopts. An
// acquire script that returns a counter (a fenced acquisition) continues,
// once granted, with a counter increment on that counter, and answers its
// result if the grant's validity still holds when it is acknowledged.

const (
	// RegistryKey is a set, in MarkerDB, of every counter key lockproxy
	// wrote on the master: what a repair restores.
	RegistryKey = "lockproxy:counters"
	// RepairKey, in MarkerDB, says whether the master's counters were
	// restored since it last lost its data: "p:<start>" pending, "d:<start>"
	// done, <start> being that quarantine's start in ms (master clock).
	RepairKey = "lockproxy:repair"
)

// CounterError is a counter operation the engine refuses itself, where
// Redis's INCR would refuse too or lockproxy cannot count; the proxy words
// the client's reply (proxy/errors.go).
type CounterError struct{ Why CounterWhy }

// CounterWhy says why a counter operation was refused.
type CounterWhy uint8

const (
	// NotInteger: a master holds a value INCR refuses (a lock's token,
	// leading zeros, out of int64).
	NotInteger CounterWhy = iota + 1
	// Overflow: the increment would pass 2^63-1.
	Overflow
	// HasExpiry: a master holds an integer with an expiry, a lock or a
	// value lockproxy did not write; a counter that expires starts over.
	HasExpiry
)

// Error is Redis's wording, for logs and tests.
func (e *CounterError) Error() string {
	switch e.Why {
	case Overflow:
		return "ERR increment or decrement would overflow"
	case HasExpiry:
		return "ERR the key has an expiry"
	}
	return "ERR value is not an integer or out of range"
}

// errCounterTTL is counterWriteScript's error for a value with an expiry
// (a master's reply, as WRONGTYPE is).
const errCounterTTL = "ERR the key has an expiry, so it is a lock or a value lockproxy did not write: lockproxy counts only on keys without one, as a counter that expires starts over"

// counterState is what a counter request adds to a Request.
type counterState struct {
	by       int64 // the increment; 0 reads (GET, the write-back of a read)
	asBulk   bool  // GET: the client gets a bulk string; INCR an integer
	readOnly bool  // a repair's read: answer the maximum, write nothing
	target   int64 // the value written by the continuation
}

// Continuations: what a decided request does instead of publishing.
const (
	contNone         uint8 = iota
	contCounterWrite       // a counter read writes its target to every master
	contFence              // a granted fenced acquisition increments its counter
	contRaise              // a re-entrant request raises its token's counts (reentrant.go)
)

// Incr is INCRBY key by, by >= 0: the max-register's increment. The
// request is keyed, so that this proxy runs one counter operation per key
// at a time.
func (e *Engine) Incr(key []byte, by int64, t0 int64) *Request {
	return &Request{kind: Counter, agg: AggCounter, nkeys: 1, Key: string(key),
		cmd: counterReadCommand(key), ctr: &counterState{by: by}, t0: t0}
}

// readCounter is a repair's read of key: the maximum a quorum of counter
// voters holds (an integer), nil where none holds it; nothing is written.
func (e *Engine) readCounter(key []byte) *Request {
	return &Request{kind: Counter, agg: AggCounter, nkeys: 1, Key: string(key),
		cmd: counterReadCommand(key), ctr: &counterState{readOnly: true}, t0: batching.Now()}
}

func counterReadCommand(key []byte) []byte {
	return AppendEvalSHA(nil, counterReadScript.SHA1, [][]byte{key}, nil)
}

// counterWriteCommand sets key to v on a master unless it holds more.
func counterWriteCommand(key []byte, v int64) []byte {
	return AppendEvalSHA(nil, counterWriteScript.SHA1, [][]byte{key},
		[][]byte{strconv.AppendInt(nil, v, 10), []byte(strconv.Itoa(MarkerDB)), []byte(RegistryKey)})
}

// ErrRepairPending is a master's vote on a counter that does not count:
// it lost its data and its counters are not restored yet (repair.go).
var ErrRepairPending = errors.New("its counters are not restored yet since it lost its data, so it does not vote on counters (it may on locks)")

// voteErr says why master's reply is no vote for r, or nil; it is called
// only while the master is quarantined, barred or awaits its counters'
// repair. A GET counts a master whose counters await their repair as a lock
// read only (notCounter). r.mu is held.
func (r *Request) voteErr(master int) error {
	if r.kind == Counter {
		return r.e.noCounterVote(master)
	}
	err := r.e.noVote(master)
	if err == nil && r.agg == AggValue && r.e.repairs[master].Load() {
		r.notCounter |= 1 << master
	}
	return err
}

// noCounterVote is noVote for counters: a master whose counters await
// their repair does not vote on them; one whose counters were restored
// votes on them even while its restart quarantine lasts, since that
// quarantine waits for locks it lost to expire, and restored counters have
// nothing to wait for (repair.go). Unchecked, bootstrapping, evicting or
// stale masters do not vote, as for locks.
//
// The quarantine is read before the repair flag: a check that finds the
// master lost its data stores the flag first and the quarantine's reason
// after (applyMarker), so a reader that sees the reason WhyRestarted also
// sees the flag. Read the other way round, a reply between the two stores
// saw no repair pending and a restart, and counted a vote of a master
// whose counters were gone.
func (e *Engine) noCounterVote(i int) error {
	err := e.noVote(i)
	if e.repairs[i].Load() {
		return ErrRepairPending
	}
	var q *QuarantineError
	if errors.As(err, &q) && (q.Why == WhyRestarted || q.Why == WhyEvicting) && e.cfg.Quarantine && !e.noRepair.Load() {
		// Its loss was recorded with the quarantine, and its repair is
		// done; a stale or evicting bar would still be reported after
		// it, not the quarantine's own end (barEnding).
		return e.barredErrOf(i, e.barred[i].Load()&^barEnding)
	}
	return err
}

// decideCounter decides an AggCounter request once a quorum of counter
// voters answered, or none can. r.mu is held.
func (r *Request) decideCounter(q, outstanding int32, force bool) bool {
	switch {
	case r.answered >= q:
		r.counterRead()
	case force || r.answered+outstanding < q:
		r.err = r.noQuorum()
	default:
		return false
	}
	return true
}

// counterRead takes the maximum of the counted replies and either answers
// (an error, a repair's read) or continues with the write. r.mu is held.
func (r *Request) counterRead() {
	m, holders, exists, badRep, bad := r.counterMax(0)
	c := r.ctr
	switch {
	case badRep != nil:
		r.reply = *badRep // a master's own error (WRONGTYPE)
	case bad != nil:
		r.err = bad
	case c.readOnly && exists:
		r.reply = resp.Reply{Type: resp.Integer, Int: m}
	case c.readOnly:
		r.reply = resp.ReplyNil
	case c.by > 0 && m > math.MaxInt64-c.by:
		r.err = &CounterError{Why: Overflow}
	case c.by == 0 && holders >= r.e.q:
		r.reply = c.answer(m) // a quorum holds it already: nothing to write
	default:
		c.target = m + c.by
		r.chain(contCounterWrite)
	}
}

// counterGet is GET's counter path, tried once a quorum answered and no
// value is held by a quorum: when every counted reply is a counter value
// (an integer without expiry, which only counters are: lockproxy writes
// every lock with one) or no key, and at least one is a counter, GET
// answers the maximum, written back first unless a quorum holds it. Any
// other reply (a lock's value, a hash, an error) leaves GET a lock read.
// Masters whose counters await their repair count for the lock read only;
// when too few others answered, a counter's GET is NOQUORUM once forced.
// It reports whether it decided r. r.mu is held.
func (r *Request) counterGet(q int32, force bool) bool {
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == replied {
			rep := r.replyAt(i)
			if _, _, kind := counterValue(&rep); kind == notCounterValue {
				return false
			}
		}
	}
	m, holders, exists, _, _ := r.counterMax(r.notCounter)
	switch {
	case !exists:
		return false
	case r.counted(r.notCounter) < q:
		if force {
			r.err = r.counterNoQuorum()
		}
		return force
	}
	r.ctr = &counterState{asBulk: true, target: m}
	if holders >= r.e.q {
		r.reply = r.ctr.answer(m)
		return true
	}
	r.chain(contCounterWrite)
	return true
}

// counterNoQuorum is GET's NOQUORUM on a counter: the masters whose
// counters await their repair are among those whose vote did not count.
// r.mu is held.
func (r *Request) counterNoQuorum() *NoQuorumError {
	e := r.noQuorum()
	e.Answered = int(r.counted(r.notCounter))
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == replied && r.notCounter&(1<<i) != 0 {
			e.Masters = append(e.Masters, MasterFailure{Addr: r.e.cfg.Masters[i], Err: ErrRepairPending})
		}
	}
	return e
}

// counted is the number of replies counted as votes, but for masters in
// skip. r.mu is held.
func (r *Request) counted(skip uint16) int32 {
	var n int32
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == replied && skip&(1<<i) == 0 {
			n++
		}
	}
	return n
}

// Kinds of counterValue.
const (
	noKey = iota
	counterKind
	notCounterValue
)

// counterValue reads one master's reply to counterReadScript: the value,
// whether it has an expiry, and whether it is a counter, no key, or
// something else.
func counterValue(rep *resp.Reply) (v int64, ttl bool, kind int) {
	if rep.Type != resp.Array || len(rep.Elems) != 2 || rep.Elems[1].Type != resp.Integer {
		return 0, false, notCounterValue
	}
	val, pttl := &rep.Elems[0], rep.Elems[1].Int
	switch {
	case val.Type == resp.Nil:
		return 0, false, noKey
	case val.Type != resp.Bulk:
		return 0, false, notCounterValue
	}
	n, ok := ParseCounter(val.Str)
	if !ok || pttl != -1 {
		return n, ok && pttl != -1, notCounterValue
	}
	return n, false, counterKind
}

// counterMax is the largest counter among the counted replies of masters
// not in skip, how many hold it, whether any holds the key, and, when some
// reply is not a counter, a master's error reply or the engine's refusal.
// r.mu is held.
func (r *Request) counterMax(skip uint16) (m int64, holders int, exists bool, badRep *resp.Reply, bad error) {
	seen := false
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || skip&(1<<i) != 0 {
			continue
		}
		rep := r.replyAt(i)
		v, ttl, kind := counterValue(&rep)
		switch {
		case kind == noKey:
			v = 0
		case kind == counterKind:
		case rep.Type == resp.Error:
			bad := rep
			return 0, 0, false, &bad, nil
		case ttl:
			return 0, 0, false, nil, &CounterError{Why: HasExpiry}
		default:
			return 0, 0, false, nil, &CounterError{Why: NotInteger}
		}
		switch {
		case !seen || v > m:
			m, holders = v, 1
		case v == m:
			holders++
		}
		seen, exists = true, exists || kind == counterKind
	}
	return m, holders, exists, nil, nil
}

// answer is v as the client gets it.
func (c *counterState) answer(v int64) resp.Reply {
	if c.asBulk {
		return resp.Reply{Type: resp.Bulk, Str: strconv.AppendInt(nil, v, 10)}
	}
	return resp.Reply{Type: resp.Integer, Int: v}
}

// ParseCounter parses a counter's value as INCR does: a canonical decimal
// int64 (no sign but a leading -, no leading zeros, no spaces).
func ParseCounter(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 || (len(b) > 1 && b[0] == '0') || (len(b) > 1 && b[0] == '-' && b[1] == '0') {
		return 0, false
	}
	for i, c := range b {
		if (c < '0' || c > '9') && !(i == 0 && c == '-' && len(b) > 1) {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// chain makes r continue with a child request instead of publishing its
// outcome now: the engine calls continueWith once r.mu is released
// (takeRetry, as for a split vote's retry). r.mu is held.
func (r *Request) chain(k uint8) {
	r.cont, r.retrying = k, true
}

// continueWith dispatches r's continuation, a child request whose outcome
// r adopts (adopt). The child holds a reference to r until it is itself
// released, as a split vote's retry does.
func (e *Engine) continueWith(r *Request) {
	r.ref()
	c := &Request{e: e, t0: batching.Now()}
	c.coldOf().parent = r
	c.refs.Store(1) // adopt's
	switch r.cont {
	case contCounterWrite:
		c.kind, c.agg, c.rule, c.nkeys = Counter, AggVote, &YesOne, 1
		c.cmd = counterWriteCommand(argIn(r.cmd, 3), r.ctr.target)
	case contFence:
		c.kind, c.agg, c.nkeys = Counter, AggCounter, 1
		c.cmd, c.ctr = counterReadCommand(r.fence()), &counterState{by: 1}
	case contRaise:
		c.kind, c.agg, c.rule, c.nkeys = Extend, AggVote, &YesOne, 1
		c.cmd, c.noRk = r.raiseCommand(r.reent.target), rkZero
		// Only the masters whose yes in the first round set the lock's
		// TTL may vote: another holding the token keeps an older TTL,
		// and its 1 made a grant look valid for longer than its key
		// lived (found by review).
		r.mu.Lock()
		for i := 0; i < e.n; i++ {
			if r.state[i] != replied || !r.yesAt(i) {
				c.cold.skip |= 1 << i
				continue
			}
			r.reent.leveled |= 1 << i // raised here: no level-up (levelup.go)
		}
		r.mu.Unlock()
	}
	if e.dispatch(c, c.t0) {
		e.decided(c)
	}
}

// adoptCounter takes the outcome of r's continuation. r.mu is held.
func (r *Request) adoptCounter(rep resp.Reply, err error, won bool) {
	switch r.cont {
	case contCounterWrite:
		switch {
		case won:
			r.reply = r.ctr.answer(r.ctr.target)
		case err != nil:
			r.err = err
		case rep.Type == resp.Error:
			r.reply = rep // the masters' refusal
		default:
			r.err = &CounterError{Why: NotInteger} // no refusal to pass on (none is expected)
		}
	case contFence:
		r.fenced(rep, err)
	case contRaise:
		r.raised(err, won)
	}
}

// fenced ends a granted fenced acquisition with its counter's increment:
// the client gets the new value when the grant is still valid now. Else
// the grant is undone and the client gets the not-acquired reply (no
// validity left: its token could follow a later holder's) or the error.
// r.mu is held.
func (r *Request) fenced(rep resp.Reply, err error) {
	left := Validity(r.TTL, time.Duration(batching.Now()-r.t0), r.e.cfg.DriftFactor)
	if r.TTL == 0 {
		left = 1 // a script without a TTL of its own
	}
	switch {
	case err == nil && rep.Type == resp.Integer && left > 0:
		r.reply, r.validity = r.withToken(rep), left
		r.levelUp() // a fenced re-entry's low counts (levelup.go)
		return
	case err == nil && rep.Type == resp.Integer:
		r.reply = r.lostReply()
	case err != nil:
		r.err = err
	default:
		r.reply = rep
	}
	r.won = false
	r.undo()
}

// withToken is the client's reply to a granted fenced acquisition: the
// token itself, or the yes reply with the token in its fenceAt-th element
// in place of the one master's counter it carried. r.mu is held.
func (r *Request) withToken(tok resp.Reply) resp.Reply {
	at := int(r.cold.fenceAt) // r.fence is set: r.cold too
	if at == 0 || r.reply.Type != resp.Array || len(r.reply.Elems) < at {
		return tok
	}
	rep := r.reply
	rep.Elems = append([]resp.Reply(nil), rep.Elems...)
	rep.Elems[at-1] = tok
	return rep
}
