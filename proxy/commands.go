package proxy

import (
	"bytes"
	"fmt"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// cmdFunc handles one command; args[0] is the command name. It either
// appends a local reply with c.local… or submits a quorum request with
// s.submit.
type cmdFunc func(s *Server, c *client, args [][]byte)

type cmdSpec struct {
	fn    cmdFunc
	arity int  // as Redis: n exact, -n at least n (name included)
	open  bool // allowed before AUTH
}

// commands is the dispatch table, from lower-case name to handler.
var commands map[string]cmdSpec

func init() {
	commands = map[string]cmdSpec{
		// Lock operations: quorum over the masters.
		"set":     {fn: cmdSet, arity: -3},
		"setnx":   {fn: cmdSetNX, arity: 3},
		"eval":    {fn: cmdEval, arity: -3},
		"evalsha": {fn: cmdEval, arity: -3},
		"get":     {fn: cmdGet, arity: 2},
		"pttl":    {fn: cmdPTTL, arity: 2},
		"ttl":     {fn: cmdPTTL, arity: 2},
		"exists":  {fn: cmdExists, arity: -2},
		"hget":    {fn: cmdHGet, arity: 3},
		"hexists": {fn: cmdHExists, arity: 3},
		"del":     {fn: cmdDel, arity: -2},
		"unlink":  {fn: cmdDel, arity: -2},
		"pexpire": {fn: cmdExpire, arity: -3},
		"expire":  {fn: cmdExpire, arity: -3},
		"script":  {fn: cmdScript, arity: -2},
		// Counters: a quorum max-register (fencing tokens).
		"incr":   {fn: cmdIncr, arity: 2},
		"incrby": {fn: cmdIncr, arity: 3},
		"decr":   {fn: cmdDecr, arity: 2},
		"decrby": {fn: cmdDecr, arity: 3},
		// Pub/sub and blocking pops on signal lists (proxy/pubsub).
		"subscribe":    {fn: cmdSubscribe, arity: -2},
		"psubscribe":   {fn: cmdSubscribe, arity: -2},
		"ssubscribe":   {fn: cmdSubscribe, arity: -2},
		"unsubscribe":  {fn: cmdSubscribe, arity: -1},
		"punsubscribe": {fn: cmdSubscribe, arity: -1},
		"sunsubscribe": {fn: cmdSubscribe, arity: -1},
		"publish":      {fn: cmdPublish, arity: 3},
		"spublish":     {fn: cmdPublish, arity: 3},
		"blpop":        {fn: cmdBlockingPop, arity: -3},
		"brpop":        {fn: cmdBlockingPop, arity: -3},
		// Connection and introspection: answered by lockproxy itself.
		"ping":    {fn: cmdPing, arity: -1},
		"echo":    {fn: cmdEcho, arity: 2},
		"quit":    {fn: cmdQuit, arity: -1, open: true},
		"reset":   {fn: cmdReset, arity: 1, open: true},
		"select":  {fn: cmdSelect, arity: 2},
		"auth":    {fn: cmdAuth, arity: -2, open: true},
		"hello":   {fn: cmdHello, arity: -1, open: true},
		"client":  {fn: cmdClient, arity: -2},
		"command": {fn: cmdCommand, arity: -1},
		"info":    {fn: cmdInfo, arity: -1},
		"config":  {fn: cmdConfig, arity: -2},
		// A lock's compare-and-delete or compare-and-extend as a
		// transaction (transaction.go).
		"watch":   {fn: cmdWatch, arity: -2},
		"unwatch": {fn: cmdUnwatch, arity: 1},
		"multi":   {fn: cmdMulti, arity: 1},
		"exec":    {fn: cmdExec, arity: 1},
		"discard": {fn: cmdDiscard, arity: 1},
	}
}

// command parses and starts one command of c's pipeline.
func (s *Server) command(c *client, args [][]byte) {
	if len(args) == 0 {
		return
	}
	c.greeted = true
	var buf [16]byte
	name := lowerName(&buf, args[0])
	spec, ok := commands[string(name)]
	if !ok {
		if c.tx != nil && c.tx.multi {
			c.tx.dirty = true // as Redis flags the transaction
		}
		c.errorf("ERR unknown or unsupported command '%s': lockproxy serves lock commands only (SET NX PX, EVAL/EVALSHA of lock scripts, GET, PTTL, DEL, PEXPIRE…); see README", clip(args[0]))
		s.cfg.Metrics.Request("unsupported", "error")
		return
	}
	if !c.authed && !spec.open {
		c.errorf("%s Authentication required.", errPrefixNoAuth)
		return
	}
	if txCommand(s, c, string(name), args) {
		return // queued, or refused inside MULTI
	}
	if (spec.arity > 0 && len(args) != spec.arity) || (spec.arity < 0 && len(args) < -spec.arity) {
		if c.tx != nil && c.tx.multi {
			c.tx.dirty = true // as Redis flags the transaction (review, helper-54)
		}
		c.errorf("ERR wrong number of arguments for '%s' command", string(name)) // a copy: name is on the stack
		return
	}
	if msg := subscribedRefusal(c, name); msg != "" {
		c.errorf("%s", msg)
		return
	}
	if c.conn != nil && len(c.slots) > 0 && overKeys(name, args) {
		// A command over several keys takes no place in the key table,
		// so it would go out before the commands ahead of it in the
		// pipeline that still wait for their keys (a DEL running before
		// the same connection's SET NX; review, helper-64): it runs once
		// their replies are out, first in the next pipeline, as BLPOP.
		c.barrier = true
		return
	}
	spec.fn(s, c, args)
}

// overKeys reports whether a command names several keys and so is not
// ordered by the key table: DEL, UNLINK or EXISTS of more than one key,
// EVAL or EVALSHA with more than one KEYS.
func overKeys(name []byte, args [][]byte) bool {
	switch string(name) {
	case "del", "unlink", "exists":
		return len(args) > 2
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		if len(args) < 3 {
			return false
		}
		n, ok := resp.ParseRedisInt(args[2])
		return ok && n > 1
	}
	return false
}

// equalFoldASCII reports whether b is lower (lower case) in any ASCII case,
// as Redis compares names (strcasecmp). strings.EqualFold also folds 'ſ'
// to 's' and the Kelvin sign to 'k': a script's command argument
// "publiſh" passed as PUBLISH, and the masters failed at it halfway
// through the script (TestCommandArgumentFoldedAsRedisDoes).
func equalFoldASCII(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func lowerName(buf *[16]byte, b []byte) []byte {
	if len(b) > len(buf) {
		return bytes.ToLower(b)
	}
	n := copy(buf[:], b)
	for i := 0; i < n; i++ {
		if c := buf[i]; 'A' <= c && c <= 'Z' {
			buf[i] = c + 'a' - 'A'
		}
	}
	return buf[:n]
}

// clip shortens client-supplied text echoed in errors.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// renderKind says how a slot's outcome becomes the client's reply.
type renderKind uint8

const (
	renderLocal      renderKind = iota // bytes already encoded in c.out
	renderReply                        // the quorum reply as it is
	renderSetNX                        // OK → :1, anything else → :0
	renderOKNil                        // granted → +OK, anything else → nil
	renderTTLSecs                      // a PTTL in ms → TTL in s
	renderPublish                      // the receivers of a PUBLISH over the masters' counts
	renderBlocked                      // a BLPOP's answer (blk.reply)
	renderBatch                        // a batch script's parts side by side (parts)
	renderBulkIsOne                    // a value → :1, nil → :0 (HEXISTS)
	renderWatchedGet                   // GET of a watched key: the reply, kept for EXEC
	renderExec                         // EXEC's script: 1 → [1], else the aborted null
	renderExecAbsent                   // EXEC of a key read absent: EXISTS 0 → [0], else null
	renderPushes                       // the next off taken pub/sub messages (pushesFirst; framed by finish)
)

// slot is one command's place in the pipeline's replies.
type slot struct {
	req      *quorum.Request
	kind     renderKind
	resp3    bool
	off, end int          // renderLocal: c.localBuf[off:end]; renderPushes: off messages
	ev       *slotEvent   // what its decision tells the other proxies (events.go)
	pub      *publishSlot // renderPublish
	blk      *blocker     // renderBlocked
	parts    []slot       // renderBatch: one per key, in order
}

// Local replies are encoded at once (with the protocol in force for that
// command) into c.localBuf, and copied in order by render.
func (c *client) local(enc func([]byte) []byte) {
	off := len(c.localBuf)
	c.localBuf = enc(c.localBuf)
	c.slots = append(c.slots, slot{kind: renderLocal, off: off, end: len(c.localBuf)})
}

func (c *client) errorf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	c.local(func(b []byte) []byte { return resp.AppendError(b, msg) })
}

func (c *client) status(st string) {
	c.local(func(b []byte) []byte { return resp.AppendStatus(b, st) })
}

func (c *client) integer(n int64) {
	c.local(func(b []byte) []byte { return resp.AppendInt(b, n) })
}

func (c *client) bulk(v []byte) {
	c.local(func(b []byte) []byte { return resp.AppendBulk(b, v) })
}

// submit starts a quorum request for this command.
func (s *Server) submit(c *client, r *quorum.Request, kind renderKind) {
	c.slots = append(c.slots, slot{req: r, kind: kind, resp3: c.resp3})
	s.cfg.Engine.Submit(c.w, r)
}

// releaseSlots gives the rendered pipeline's requests back to the engine
// and empties the slots. The waiter must be Reset first: it refers to them.
func (c *client) releaseSlots() {
	for i := range c.slots {
		if r := c.slots[i].req; r != nil {
			r.Release()
		}
		for _, p := range c.slots[i].parts {
			p.req.Release()
		}
		c.slots[i] = slot{}
	}
	c.slots = c.slots[:0]
	if cap(c.slots) > keepSlotsMax {
		c.slots = nil // don't keep a long pipeline's slots on an idle connection
	}
}

// keepSlotsMax is the most slots a connection keeps between pipelines: a
// lock client's pipeline is a few commands, and the slots of a long one
// (up to a turn's worth, thousands of about 90 bytes) are not charged to
// the input budget, so 10,000 connections that each sent one would hold
// them for good.
const keepSlotsMax = 256

// render appends slot sl's reply to out.
func (s *Server) render(out []byte, c *client, sl *slot) []byte {
	switch sl.kind {
	case renderLocal:
		return append(out, c.localBuf[sl.off:sl.end]...)
	case renderBlocked:
		return append(out, sl.blk.reply...)
	case renderPublish:
		return s.renderPublished(out, sl)
	case renderBatch:
		return s.renderBatched(out, sl)
	}
	r := sl.req
	if sl.ev != nil {
		s.emit(sl)
	}
	s.cfg.Metrics.Outcome(r)
	rep, err := r.Result()
	if err != nil {
		return resp.AppendError(out, errorText(err))
	}
	switch sl.kind {
	case renderSetNX:
		if r.Outcome() == quorum.Granted {
			return resp.AppendInt(out, 1)
		}
		return resp.AppendInt(out, 0)
	case renderOKNil:
		if r.Outcome() == quorum.Granted {
			return resp.AppendReply(out, resp.ReplyOK, sl.resp3)
		}
		return resp.AppendReply(out, resp.ReplyNil, sl.resp3)
	case renderTTLSecs:
		if rep.Type == resp.Integer && rep.Int > 0 {
			return resp.AppendInt(out, rep.Int/1000)
		}
	case renderWatchedGet:
		c.watchedRead(r.Key, rep)
	case renderExec, renderExecAbsent:
		return renderTx(out, sl.kind, rep, sl.resp3)
	case renderBulkIsOne:
		switch rep.Type {
		case resp.Bulk:
			return resp.AppendInt(out, 1)
		case resp.Error: // the masters' (WRONGTYPE…): no answer to read
		default:
			return resp.AppendInt(out, 0)
		}
	}
	return resp.AppendReply(out, rep, sl.resp3)
}
