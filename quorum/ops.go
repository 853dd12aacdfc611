package quorum

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// The lock operations. The proxy parses a client's command and calls one
// constructor; the engine owns everything after: the masters' commands,
// the decision rules, the undo. The outcome is read with Outcome and
// Result once the request is decided.

// UndoOp is the compensating operation of a failed acquisition.
type UndoOp uint8

const (
	UndoNone       UndoOp = iota // nothing is undone
	UndoDelIfValue               // delete each lock key whose value is the token
	UndoHashDecr                 // take 1 from the token's field of each hash lock key
	UndoZRem                     // remove the token (and the extra members) from each sorted-set lock key
	UndoJSONField                // delete each lock key whose JSON value has the token in a field
)

// Arg names one argument of EVAL: KEYS[Index] or ARGV[Index], 1-based; the
// zero Arg names none.
type Arg struct {
	Keys  bool
	Index int
}

// ScriptOp says how the engine runs a client's lock script: the script is
// sent unchanged to every master (EVALSHA) and its replies counted as votes.
type ScriptOp struct {
	SHA1 string
	// Body is loaded on a master (SCRIPT LOAD) before the script's first
	// use on each of its connections, unless Preloaded: in Config.Scripts,
	// loaded on every connection.
	Body      string
	Preloaded bool
	// RunAs, when set, is the sha1 of one of lockproxy's own scripts the
	// masters run instead, with max_ttl in ms appended to ARGV.
	RunAs string
	Kind  Kind
	Yes   VoteRule
	// No is the client's reply when the vote is lost and no master gave a
	// usable one; NoPTTLAt says where a no reply carries the holder's PTTL
	// (-1 nowhere, 0 the reply, i the array's i-th element): the client
	// then gets the no reply with the longest.
	No       resp.Reply
	NoPTTLAt int
	Combine  Combine
	// NoIsNoop: a reply that is neither a yes nor an error proves the
	// script wrote nothing on that master (no undo there).
	NoIsNoop bool
	// AbsentYes, for a Release: the yes reply the script gives both
	// where there is no lock and where it deletes the caller's last count
	// (Redisson before 3.10.6 answers 1 to either); it must be one of
	// the common replies (AbsentYesSupported). The client hears it only
	// when the masters that may still hold the token are fewer than a
	// quorum (releaseYes, decide.go).
	AbsentYes *resp.Reply
	// DeletedYes, for a Release: its yes reply where it deleted the lock,
	// when another yes reply says a count is left (a re-entrant release:
	// Redisson's unlock answers 1 and 0) or comes from a master without
	// the lock (AbsentYes, the same reply). It must be one of the common
	// replies (AbsentYesSupported). The client hears it over a count left
	// only when the masters that may still hold the token are fewer than
	// a quorum (releaseYes, decide.go).
	DeletedYes *resp.Reply
	// Undo is the compensation of a failed Acquire; Token is where the
	// script's token is (also for other kinds: a write that carries it);
	// UndoExtra are constant members an UndoZRem removes besides the token,
	// UndoField the JSON field of an UndoJSONField.
	Undo       UndoOp
	Token      Arg
	TokenConst string // the token when it is written in the script (tokenless locks)
	UndoExtra  []string
	UndoField  string
	// LockKeys are the KEYS that name the lock (1-based); EachKey: every
	// KEYS is one. KeyArg names a lock key passed in ARGV instead.
	LockKeys []int
	EachKey  bool
	KeyArg   Arg
	// Counter, for an acquire (or acquire-or-extend) script whose yes reply
	// is the new value of a counter it increments (a fencing token): that
	// counter's key. A grant then continues with the max-register's
	// increment of it, whose value the client gets (counter.go): the
	// reply itself, or with CounterAt that element (1-based) of the yes
	// reply, the rest of it as the masters answered.
	Counter   Arg
	CounterAt int
	// Checked: Body is wrapped by WrapCheck, and its replies carry what
	// each master's copy of the lock looked like (check.go). CheckTTL: a
	// yes also needs the copy's PTTL to outlast the validity (any TTL the
	// validity is accounted from, relative or an absolute expiry).
	Checked, CheckTTL bool
	// Reentrant marks a re-entrant hash lock's acquire or renewal (Kind
	// Extend): Body and SHA1 are then its client's script wrapped by
	// WrapReentrant, and a yes needs a quorum whose counts keep the
	// holder's depth (reentrant.go).
	Reentrant bool
}

// Acquire is SET key token NX PX ttl: a quorum acquisition. t0 is when the
// command was parsed (batching.Now()); ttl must leave validity.
func (e *Engine) Acquire(key, token []byte, ttl time.Duration, t0 int64) *Request {
	ttl = ttl.Truncate(time.Millisecond) // what PX sends: validity counts no more
	r := NewRequest()
	cmd, k, tok := appendSetNX(r.CmdBuffer(96+len(key)+len(token)), key, token, ttl.Milliseconds())
	r.kind, r.agg, r.rule = Acquire, AggVote, &YesOK
	r.Key = unsafe.String(unsafe.SliceData(k), len(k))
	r.nkeys, r.cmd = 1, cmd
	r.undoKeys, r.undoToken, r.undoOp, r.token = r.OneUndoKey(k), tok, UndoDelIfValue, tok
	r.exclusive, r.nilIsNoop = true, true
	r.TTL, r.noRk, r.t0 = ttl, rkNil, t0
	return r
}

// appendSetNX appends SET key token NX PX ms, encoded, to dst, and returns
// it with the key and the token as slices of it (no copies).
func appendSetNX(dst, key, token []byte, ms int64) (cmd, k, tok []byte) {
	dst = append(dst, "*6\r\n$3\r\nSET\r\n"...)
	dst = resp.AppendBulk(dst, key)
	ko := len(dst) - len(key) - 2
	dst = resp.AppendBulk(dst, token)
	to := len(dst) - len(token) - 2
	dst = append(dst, "$2\r\nNX\r\n$2\r\nPX\r\n"...)
	var digits [20]byte
	dst = resp.AppendBulk(dst, strconv.AppendInt(digits[:0], ms, 10))
	return dst, dst[ko : ko+len(key) : ko+len(key)], dst[to : to+len(token) : to+len(token)]
}

// Get reads key: the value a quorum holds, else nil; a counter's maximum
// (counter.go). It is keyed, so that it runs after whatever the connection
// sent earlier on the key.
func (e *Engine) Get(key []byte, t0 int64) *Request {
	return &Request{kind: Read, agg: AggValue, nkeys: 1, Key: string(key),
		cmd: counterReadCommand(key), t0: t0}
}

// PTTL reads key's remaining validity in ms: the Q-th largest PTTL among
// the masters holding the majority value, minus drift; -2 when no quorum
// holds it.
func (e *Engine) PTTL(key []byte, t0 int64) *Request {
	return &Request{kind: Read, agg: AggValueTTL, nkeys: 1, Key: string(key),
		cmd: GetTTLCommand(key), t0: t0}
}

// ValuePTTL reads key's value and remaining validity together, as the
// script {GET key, PTTL key} does on one Redis: [value, PTTL] with GET's
// value and PTTL's figure (above), [nil, -2] when no quorum holds a value.
func (e *Engine) ValuePTTL(key []byte, t0 int64) *Request {
	return &Request{kind: Read, agg: AggValuePTTL, nkeys: 1, Key: string(key),
		cmd: ValuePTTLCommand(key), t0: t0}
}

// Exists counts the keys a quorum holds.
func (e *Engine) Exists(keys [][]byte, t0 int64) *Request {
	return keyed(&Request{kind: Read, agg: AggKeys, nkeys: len(keys), cmd: ExistsCommand(keys), t0: t0}, keys)
}

// Del deletes keys on every master and counts those a quorum held.
func (e *Engine) Del(keys [][]byte, t0 int64) *Request {
	return keyed(&Request{kind: Release, agg: AggKeys, nkeys: len(keys), cmd: DelCommand(keys), t0: t0}, keys)
}

// keyed serializes a single-key request with the connection's other
// commands on the key.
func keyed(r *Request, keys [][]byte) *Request {
	if len(keys) == 1 {
		r.Key = string(keys[0])
	}
	return r
}

// Extend is PEXPIRE key ttl: the quorum extend of legacy SETNX+EXPIRE
// code, yes when a quorum had the key with one value (YesSameValue), with
// validity accounted; the proxy answers 1 for a grant, else 0. Only a
// key that has an expiry is extended (extendScript): a counter keeps none.
func (e *Engine) Extend(key []byte, ttl time.Duration, t0 int64) *Request {
	ttl = ttl.Truncate(time.Millisecond)
	ms := strconv.AppendInt(nil, ttl.Milliseconds(), 10)
	return &Request{kind: Extend, agg: AggVote, rule: &YesSameValue, Key: string(key), nkeys: 1,
		cmd: AppendEvalSHA(nil, extendScript.SHA1, [][]byte{key}, [][]byte{ms}),
		TTL: ttl, noRk: rkZero, t0: t0, shorten: shortenDigest,
		chk: newCheck(ttl, e.cfg.DriftFactor, true)}
}

// ExtendHeld sets key's TTL to ttl on every master where it holds token
// (SET key token XX PX ttl, a lock's renewal): CappedExtendScript, the TTL
// replaced, capped at max_ttl.
func (e *Engine) ExtendHeld(key, token []byte, ttl time.Duration, t0 int64) *Request {
	ttl = ttl.Truncate(time.Millisecond)
	ms := strconv.AppendInt(nil, ttl.Milliseconds(), 10)
	maxTTL := strconv.AppendInt(nil, e.cfg.MaxTTL.Milliseconds(), 10)
	r := &Request{kind: Extend, agg: AggVote, rule: &YesOne, Key: string(key), nkeys: 1,
		cmd: AppendEvalSHA(nil, CappedExtendScript.SHA1, [][]byte{key}, [][]byte{token, ms, []byte("1"), maxTTL}),
		TTL: ttl, noRk: rkZero, t0: t0, shorten: shortenToken,
		chk: newCheck(ttl, e.cfg.DriftFactor, true)}
	r.token = argIn(r.cmd, 4) // EVALSHA sha 1 key token…: owned by the request, as a script's
	return r
}

// TTLAdds reports whether op, run with argv, adds its TTL to the key's
// remaining one (redis-py's extend with replace_ttl false, run as
// CappedExtendScript: its ARGV[3] is "0"): no single TTL to set afterwards.
func (op *ScriptOp) TTLAdds(argv [][]byte) bool {
	return op.RunAs != "" && (len(argv) < 3 || string(argv[2]) != "1")
}

// Script runs op with keys and argv on every master. ttl is the lock's TTL
// for validity accounting (0 for kinds that set none); the proxy has read
// and bounded it.
func (e *Engine) Script(op *ScriptOp, keys, argv [][]byte, ttl time.Duration, t0 int64) *Request {
	r := NewRequest()
	r.kind, r.agg, r.rule, r.combine = op.Kind, AggVote, &op.Yes, op.Combine
	r.nkeys, r.pttlAt, r.noIsNoop, r.t0, r.TTL = len(keys), int32(op.NoPTTLAt+1), op.NoIsNoop, t0, ttl
	r.setNoReply(op.No)
	if !op.Preloaded {
		r.coldOf().load = op
	}
	switch {
	case op.Kind != Release:
	case op.DeletedYes != nil:
		r.deletedYes = rkOf(op.DeletedYes)
	case op.AbsentYes != nil:
		r.deletedYes = rkOf(op.AbsentYes) // also the reply where it deletes
	}
	if op.Reentrant && (op.Kind == Acquire || op.Kind == Extend) {
		r.reent = &reentState{extend: op.Kind == Extend}
	}
	size := 64 + len(op.SHA1)
	for _, a := range keys {
		size += len(a) + 16
	}
	for _, a := range argv {
		size += len(a) + 16
	}
	r.cmd = AppendEvalSHA(r.CmdBuffer(size), op.SHA1, keys, argv)
	if op.RunAs != "" {
		maxTTL := strconv.AppendInt(nil, e.cfg.MaxTTL.Milliseconds(), 10)
		r.cmd = AppendEvalSHA(nil, op.RunAs, keys, append(append([][]byte(nil), argv...), maxTTL))
		if r.cold != nil {
			r.cold.load = nil // lockproxy's own: loaded on every connection
		}
	}
	switch {
	case op.Checked:
		r.chk = newCheck(ttl, e.cfg.DriftFactor, op.CheckTTL)
	case op.RunAs == CappedExtendScript.SHA1:
		r.chk = newCheck(ttl, e.cfg.DriftFactor, true)
	}
	// Keys and the token alias the encoded command, which the request owns.
	// argIn scans the command from its start: a script over many keys
	// splits it once instead, or naming every key would be quadratic.
	var split [][]byte
	at := func(a Arg) []byte {
		i := 2 + a.Index
		if !a.Keys {
			i += len(keys)
		}
		if len(keys)+len(argv) <= 8 {
			return argIn(r.cmd, i)
		}
		if split == nil {
			split = splitCommand(r.cmd)
		}
		return split[i]
	}
	switch {
	case !op.KeyArg.IsZero():
		k := at(op.KeyArg)
		r.Key = unsafe.String(unsafe.SliceData(k), len(k))
	case len(keys) == 1: // reads too: after this connection's earlier commands on the key
		k := at(Arg{Keys: true, Index: 1})
		r.Key = unsafe.String(unsafe.SliceData(k), len(k))
	}
	if r.reent != nil {
		// The hash whose counts a level-up raises (levelup.go): the one
		// lock key WrapReentrant reads.
		switch {
		case len(op.LockKeys) == 1:
			r.reent.key = at(Arg{Keys: true, Index: op.LockKeys[0]})
		case len(keys) == 1:
			r.reent.key = at(Arg{Keys: true, Index: 1})
		}
	}
	if r.Key == "" && len(keys) > 1 && (op.Kind == Acquire || op.Kind == AcquireOrExtend || op.Kind == Extend) {
		// No single lock key: the late-undo record looks at every key
		// it may write or count (supersede).
		c := r.coldOf()
		c.keys = make([][]byte, len(keys))
		for i := range keys {
			c.keys[i] = at(Arg{Keys: true, Index: i + 1})
		}
	}
	if !op.Counter.IsZero() && (op.Kind == Acquire || op.Kind == AcquireOrExtend) {
		c := r.coldOf()
		c.fence, c.fenceAt = at(op.Counter), int32(op.CounterAt)
	}
	switch {
	case !op.Token.IsZero():
		r.token = at(op.Token)
		if (op.Kind == Extend || op.Kind == AcquireOrExtend) && r.Key != "" && !op.TTLAdds(argv) {
			r.shorten = shortenToken // its masters run it wrapped (WrapNoShorten)
		}
	case op.TokenConst != "":
		r.token = []byte(op.TokenConst)
	}
	if op.Kind == Acquire && op.Undo != UndoNone && r.token != nil {
		r.undoOp, r.undoToken = op.Undo, r.token
		switch {
		case !op.KeyArg.IsZero():
			r.undoKeys = [][]byte{at(op.KeyArg)}
		case op.EachKey:
			for i := 1; i <= len(keys); i++ {
				r.undoKeys = append(r.undoKeys, at(Arg{Keys: true, Index: i}))
			}
		default:
			for _, i := range op.LockKeys {
				r.undoKeys = append(r.undoKeys, at(Arg{Keys: true, Index: i}))
			}
		}
		for _, m := range op.UndoExtra {
			c := r.coldOf()
			c.undoExtra = append(c.undoExtra, []byte(m))
		}
		if op.Undo == UndoJSONField {
			r.coldOf().undoExtra = [][]byte{[]byte(op.UndoField)}
		}
	}
	return r
}

// IsZero reports whether a names no argument.
func (a Arg) IsZero() bool { return a.Index == 0 }

// argIn returns argument i (0-based, the command name being 0) of an
// encoded command, which we encoded, so it is well formed.
func argIn(cmd []byte, i int) []byte {
	c := cmdReader{cmd: cmd}
	c.count()
	for j := 0; ; j++ {
		if a := c.arg(); j == i {
			return a
		}
	}
}

// splitCommand returns every argument of an encoded command (the command
// name being 0), in one pass; each aliases cmd.
func splitCommand(cmd []byte) [][]byte {
	c := cmdReader{cmd: cmd}
	out := make([][]byte, c.count())
	for j := range out {
		out[j] = c.arg()
	}
	return out
}

// cmdReader walks a command we encoded: *n, then $len and the bytes of
// each argument.
type cmdReader struct {
	cmd []byte
	p   int
}

// number reads a line's integer after its type byte.
func (c *cmdReader) number() int {
	start := c.p
	for c.cmd[c.p] != '\r' {
		c.p++
	}
	c.p += 2
	n, _ := strconv.Atoi(string(c.cmd[start+1 : c.p-2]))
	return n
}

func (c *cmdReader) count() int { return c.number() }

// arg returns the next argument, aliasing cmd.
func (c *cmdReader) arg() []byte {
	l := c.number()
	a := c.cmd[c.p : c.p+l : c.p+l]
	c.p += l + 2
	return a
}

// Broadcast sends a client's PUBLISH or SPUBLISH (cmd) of payload on
// channel to every master and keeps each one's reply, with no vote: the
// proxy answers from Replies once every master answered or node_timeout
// passed.
func (e *Engine) Broadcast(cmd string, channel, payload []byte, t0 int64) *Request {
	return &Request{kind: Read, agg: AggEach, t0: t0,
		cmd: resp.AppendCommand(nil, []byte(cmd), channel, payload)}
}

// Replies is a decided Broadcast's integer reply of each master, in the
// masters' order, negative where it gave none.
func (r *Request) Replies() []int64 {
	r.mu.Lock() // a master timed out late turns ignored under it
	defer r.mu.Unlock()
	out := make([]int64, r.e.n)
	for i := range out {
		out[i] = -1
		if r.state[i] == replied && r.replyAt(i).Type == resp.Integer {
			out[i] = r.replyAt(i).Int
		}
	}
	return out
}

// Publish sends PUBLISH channel payload to every master without waiting
// for replies (lockproxy's own events, proxy/pubsub.Publisher): the command
// joins each master's next batch; a master down misses it.
func (e *Engine) Publish(channel string, payload []byte) {
	cmd := resp.AppendCommand(nil, []byte("PUBLISH"), []byte(channel), payload)
	for _, p := range e.pipes {
		p.Submit(batching.Op{Cmd: cmd})
	}
}
