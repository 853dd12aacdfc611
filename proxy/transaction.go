package proxy

import (
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
)

// WATCH, MULTI, EXEC: the compare-and-delete and compare-and-extend of lock
// code that checks the token without a script. StackExchange.Redis's
// LockRelease and LockExtend do it on servers before Redis 8.4 (lockproxy
// says it is 7.0), as redis-py's transaction helper and older libraries do:
//
//	WATCH key; GET key            the client compares the value with its token
//	UNWATCH                       not its lock: nothing done
//	MULTI; DEL key; EXEC          its lock: deleted, unless the key changed
//	MULTI; PEXPIRE key ms; EXEC   (or EXPIRE key s): extended, likewise
//
// One Redis aborts the EXEC (a null reply) if the watched key changed
// after WATCH. Across a quorum that condition becomes: the key still holds
// the value this connection read with GET after WATCH. EXEC then runs the
// catalogued compare-and-delete or compare-and-extend script (ioredis-lock
// delifequal, pexpireifequal) with that value as the token, by quorum, and
// answers [1] when a quorum said yes, the null reply when not. A key read
// as absent is checked to be still absent (EXISTS), and the EXEC answers [0]
// (nothing to delete or extend) or null. The condition is weaker than
// Redis's only where the lock is still the caller's (the holder extended it,
// or took it again with the same token): what a lock's release or extend
// needs. Nothing else runs in a transaction: a transaction of any other
// shape is refused, command by command, saying why.

// maxWatched bounds the keys one connection watches (a lock's release
// watches one), and maxWatchedBytes their names' bytes together: they are
// kept for the connection's life, counted in client_query_buffer_total as
// client names are (4096 bytes each; kept.go); 16 names of 1 MiB on each of 60
// idle connections held 1.5 GB (review, helper-59). maxWatchValue bounds
// the value kept as a transaction's token.
const (
	maxWatched      = 16
	maxWatchedBytes = 4096
	maxWatchValue   = 4096
)

// txState is one connection's WATCH and MULTI state.
type txState struct {
	watched map[string]*watchedKey
	multi   bool
	dirty   bool     // a command was refused while queuing: EXEC aborts
	queued  [][]byte // the one command queued (DEL, UNLINK, PEXPIRE, EXPIRE)
	// plain: a MULTI without WATCH (plain.go); its queued commands, their
	// bytes, and whether one of them is a lock command.
	plain      bool
	plainQ     [][][]byte
	plainBytes int
	plainLock  bool
}

// watchedKey is what the connection read of a watched key with GET.
type watchedKey struct {
	read   bool
	absent bool
	value  []byte
	long   bool // longer than maxWatchValue: not kept
}

// txBodies are the catalogued scripts EXEC runs.
type txBodies struct{ del, pexpire []byte }

func findTxBodies(cat *catalog.Catalog) txBodies {
	var b txBodies
	for _, sc := range cat.Scripts() {
		switch sc.Name {
		case "ioredis-lock delifequal":
			b.del = []byte(sc.Body)
		case "ioredis-lock pexpireifequal":
			b.pexpire = []byte(sc.Body)
		}
	}
	return b
}

const errTxShape = "lockproxy runs a transaction only as a lock's compare-and-delete or compare-and-extend: WATCH key, GET key, then MULTI, one DEL or PEXPIRE (EXPIRE) of that key, EXEC; use a release or extend script otherwise"

// txCommand reports whether c is queuing a transaction, and if so handles
// the command (name lower-case) as Redis does inside MULTI.
func txCommand(s *Server, c *client, name string, args [][]byte) bool {
	if c.tx == nil || !c.tx.multi {
		return false
	}
	switch name {
	case "exec", "discard", "multi", "watch", "quit", "reset":
		return false
	}
	tx := c.tx
	if tx.plain {
		plainQueue(s, c, name, args)
		return true
	}
	switch {
	case tx.queued != nil:
		c.errorf("ERR %s (a second command was queued)", errTxShape)
	case (name == "del" || name == "unlink") && len(args) == 2, (name == "pexpire" || name == "expire") && len(args) == 3:
		if w := tx.watched[string(args[1])]; w == nil {
			c.errorf("ERR %s (%s of a key not watched)", errTxShape, strings.ToUpper(name))
			break
		}
		if name == "pexpire" || name == "expire" {
			if v, ok := resp.ParseRedisInt(args[2]); !ok || v <= 0 {
				c.errorf("ERR value is not an integer or out of range")
				break
			}
		}
		tx.queued = make([][]byte, len(args))
		for i, a := range args {
			tx.queued[i] = append([]byte(nil), a...)
		}
		tx.queued[0] = []byte(name)
		c.status("QUEUED")
		return true
	default:
		c.errorf("ERR %s (got %s)", errTxShape, strings.ToUpper(clip(args[0])))
	}
	tx.dirty = true
	return true
}

func cmdWatch(s *Server, c *client, args [][]byte) {
	if c.tx != nil && c.tx.multi {
		c.errorf("ERR WATCH inside MULTI is not allowed")
		return
	}
	if c.tx == nil {
		c.tx = &txState{}
	}
	if c.tx.watched == nil {
		c.tx.watched = map[string]*watchedKey{}
	}
	held := 0
	for k := range c.tx.watched {
		held += len(k)
	}
	more := 0
	adds := map[string]bool{}
	for _, k := range args[1:] {
		if _, ok := c.tx.watched[string(k)]; ok || adds[string(k)] {
			continue
		}
		adds[string(k)] = true
		if more += len(k); held+more > maxWatchedBytes {
			break // refused: the sum need not be exact past the bound
		}
	}
	if held+more > maxWatchedBytes {
		c.errorf("ERR lockproxy watches at most %d bytes of key names per connection (this WATCH would make it at least %d): a lock's release watches one key; use a release script for longer keys", maxWatchedBytes, held+more)
		return
	}
	for _, k := range args[1:] {
		if _, ok := c.tx.watched[string(k)]; !ok && len(c.tx.watched) >= maxWatched {
			c.errorf("ERR lockproxy watches at most %d keys per connection: a lock's release watches one", maxWatched)
			return
		}
		c.tx.watched[string(k)] = &watchedKey{}
	}
	c.status("OK")
}

func cmdUnwatch(s *Server, c *client, args [][]byte) {
	if c.tx != nil && !c.tx.multi {
		c.tx = nil
	}
	c.status("OK")
}

// cmdMulti starts a transaction: after WATCH, a lock's compare-and-delete
// or compare-and-extend; without, a plain one (plain.go). Redis never
// refuses MULTI, and a client that pipelines its transaction would see
// the commands after a refused MULTI run one by one.
func cmdMulti(s *Server, c *client, args [][]byte) {
	switch {
	case c.tx != nil && c.tx.multi:
		c.errorf("ERR MULTI calls can not be nested")
	case c.tx == nil || len(c.tx.watched) == 0:
		c.tx = &txState{multi: true, plain: true}
		c.status("OK")
	default:
		c.tx.multi = true
		c.status("OK")
	}
}

func cmdDiscard(s *Server, c *client, args [][]byte) {
	if c.tx == nil || !c.tx.multi {
		c.errorf("ERR DISCARD without MULTI")
		return
	}
	c.tx = nil
	c.status("OK")
}

// cmdExec runs the queued command as its compare-and-delete or
// compare-and-extend by quorum.
func cmdExec(s *Server, c *client, args [][]byte) {
	tx := c.tx
	switch {
	case tx == nil || !tx.multi:
		c.errorf("ERR EXEC without MULTI")
		return
	case tx.dirty:
		c.tx = nil
		c.errorf("EXECABORT Transaction discarded because of previous errors.")
		return
	case tx.plain:
		execPlain(s, c)
		return
	case tx.queued == nil:
		c.tx = nil
		c.local(func(b []byte) []byte { return resp.AppendArrayHeader(b, 0) })
		return
	case c.readingWatched() && c.conn != nil:
		// The GET it compares with is in flight, in this pipeline: it
		// runs once the replies before it are out, first in the next.
		c.barrier = true
		return
	}
	q := tx.queued
	w := tx.watched[string(q[1])]
	switch {
	case !w.read:
		c.tx = nil
		c.errorf("ERR %s (the key was not read with GET after WATCH: lockproxy compares with the value the client read)", errTxShape)
		return
	case w.long:
		c.tx = nil
		c.errorf("ERR %s (the value read is over %d bytes)", errTxShape, maxWatchValue)
		return
	case w.absent:
		c.tx = nil
		s.submit(c, s.cfg.Engine.Exists([][]byte{q[1]}, evloop.Now()), renderExecAbsent)
		return
	}
	var eval [][]byte
	body := s.txBodies.del
	if q[0][0] == 'p' || q[0][0] == 'e' {
		ms := q[2]
		if q[0][0] == 'e' { // EXPIRE: seconds
			v, _ := resp.ParseRedisInt(q[2])
			if v > 1<<53/1000 {
				c.tx = nil
				c.errorf("ERR invalid expire time in 'expire' command")
				return
			}
			ms = strconv.AppendInt(nil, v*1000, 10)
		}
		body = s.txBodies.pexpire
		eval = [][]byte{[]byte("EVAL"), body, []byte("1"), q[1], w.value, ms}
	} else {
		eval = [][]byte{[]byte("EVAL"), body, []byte("1"), q[1], w.value}
	}
	if body == nil {
		c.tx = nil
		c.errorf("ERR transactions need the built-in catalog's compare-and-delete and compare-and-extend scripts (ioredis-lock delifequal, pexpireifequal), which this lockproxy's catalog lacks")
		return
	}
	n := len(c.slots)
	cmdEval(s, c, eval)
	if c.deferred {
		return // runs again once the script is understood
	}
	c.tx = nil
	if len(c.slots) > n && c.slots[n].kind == renderReply {
		c.slots[n].kind = renderExec
	}
}

// readingWatched reports whether a GET of a watched key is in this
// pipeline, its reply not yet rendered.
func (c *client) readingWatched() bool {
	for i := range c.slots {
		if c.slots[i].kind == renderWatchedGet {
			return true
		}
	}
	return false
}

// watchedRead records what a GET of a watched key answered (render).
func (c *client) watchedRead(key string, rep resp.Reply) {
	if c.tx == nil {
		return // (MULTI may have come since: a pipelined transaction)
	}
	w := c.tx.watched[key]
	if w == nil {
		return
	}
	switch rep.Type {
	case resp.Bulk:
		w.read, w.absent = true, false
		w.long = len(rep.Str) > maxWatchValue
		w.value = nil
		if !w.long {
			w.value = append([]byte(nil), rep.Str...)
		}
	case resp.Nil:
		w.read, w.absent, w.value = true, true, nil
	}
}

// renderTx renders an EXEC (renderExec: the script's 1 → [1], else the
// null reply of an aborted transaction; renderExecAbsent: no key → [0],
// a key → null).
func renderTx(out []byte, kind renderKind, rep resp.Reply, resp3 bool) []byte {
	var done bool
	if kind == renderExec {
		done = rep.Type == resp.Integer && rep.Int == 1
	} else {
		done = rep.Type == resp.Integer && rep.Int == 0
	}
	if !done {
		return appendNullArray(out, resp3)
	}
	out = resp.AppendArrayHeader(out, 1)
	if kind == renderExec {
		return resp.AppendInt(out, 1)
	}
	return resp.AppendInt(out, 0)
}
