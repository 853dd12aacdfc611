package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// A MULTI without WATCH: a plain transaction. Redis never refuses MULTI;
// it queues every command (+QUEUED), or refuses one at queue time and then
// aborts the EXEC (EXECABORT), running nothing. Clients pipeline the whole
// transaction (redis-py pipeline(transaction=True), node_redis multi()),
// so a refused MULTI made the commands after it run one by one while the
// client heard that its transaction failed: a SET NX taken, reported lost.
//
// What EXEC can run without lying: the commands lockproxy answers itself
// (PING, ECHO, SELECT, CLIENT, COMMAND, INFO, CONFIG, SCRIPT: node-mutex
// loads its scripts in MULTI, SCRIPT LOAD…, EXEC), and at most one lock
// command. A Redis transaction is atomic against other clients; a lock
// command through lockproxy is one quorum decision, so one of them with
// local commands has an outcome one Redis could have had. Several lock
// commands would run one after the other on the masters, and others'
// commands may come between: two clients that each take locks a and b in
// one transaction, in opposite orders, can each get one lock ([OK, nil]
// twice), which no Redis allows (the first transaction takes both); a
// transaction of EXPIREs (rq's heartbeat over several queues) can answer
// [1, 1] for two locks that never existed together (a released, then b
// taken, between its EXPIREs). So a second lock command is refused at
// queue time, saying why, and EXEC aborts: nothing runs. Other commands
// (pub/sub, BLPOP, HELLO, AUTH…) are refused at queue time too. A lock
// command's own refusal (SET without NX, a script lockproxy does not
// understand) comes at EXEC, in its place in the array, as a command
// failing inside a Redis transaction does.

// maxPlainQueued and maxPlainBytes bound a plain transaction's queue
// (commands, and their arguments' bytes together): it is held until EXEC
// or DISCARD, and counted in client_query_buffer_total (kept.go). A transaction runs at
// most one lock command and a few local ones (node-mutex: two SCRIPT
// LOADs of under 1 KiB); past a bound the command is refused and EXEC
// aborts, and nothing more is kept.
const (
	maxPlainQueued = 64
	maxPlainBytes  = 64 << 10
)

// plainLocal are the commands lockproxy answers itself that a plain
// transaction queues; plainLock, the lock commands (one per transaction).
var (
	plainLocal = map[string]bool{"ping": true, "echo": true, "select": true, "client": true, "command": true, "info": true, "config": true, "script": true}
	plainLock  = map[string]bool{"set": true, "setnx": true, "eval": true, "evalsha": true, "get": true, "pttl": true, "ttl": true, "exists": true, "hget": true, "hexists": true, "del": true, "unlink": true, "pexpire": true, "expire": true, "incr": true, "incrby": true, "decr": true, "decrby": true}
)

// plainQueue queues a command of a plain transaction, or refuses it and
// flags the transaction.
func plainQueue(s *Server, c *client, name string, args [][]byte) {
	tx := c.tx
	spec := commands[name]
	size := 0
	for _, a := range args {
		size += len(a)
	}
	switch {
	case (spec.arity > 0 && len(args) != spec.arity) || (spec.arity < 0 && len(args) < -spec.arity):
		c.errorf("ERR wrong number of arguments for '%s' command", name)
	case !plainLocal[name] && !plainLock[name]:
		c.errorf("ERR lockproxy does not run %s inside MULTI: a transaction without WATCH runs the commands lockproxy answers itself (PING, ECHO, SELECT, CLIENT, SCRIPT…) and at most one lock command; send it outside MULTI (see README \"Commands\")", strings.ToUpper(name))
	case plainLock[name] && tx.plainLock:
		c.errorf("ERR lockproxy runs at most one lock command in a transaction: over several masters, two lock commands are not atomic together as in a Redis transaction, so it runs none of them; send them outside MULTI (a pipeline without transaction) or one per transaction (see README \"Commands\")")
	case len(tx.plainQ) >= maxPlainQueued || tx.plainBytes+size > maxPlainBytes:
		c.errorf("ERR lockproxy queues at most %d commands and %d bytes of arguments in a transaction: a lock's transaction needs a few; send these outside MULTI", maxPlainQueued, maxPlainBytes)
	default:
		if !tx.dirty { // an aborting transaction keeps nothing
			q := make([][]byte, len(args))
			for i, a := range args {
				q[i] = append([]byte(nil), a...)
			}
			q[0] = []byte(name)
			tx.plainQ = append(tx.plainQ, q)
			tx.plainBytes += size
			tx.plainLock = tx.plainLock || plainLock[name]
		}
		c.status("QUEUED")
		return
	}
	tx.dirty = true
	tx.plainQ, tx.plainBytes = nil, 0
}

// execPlain runs a plain transaction's queue: an array of its commands'
// replies, in order. Before anything runs, the scripts it loads or runs
// are understood (the EXEC waits, and runs again once they are) and a
// command over several keys waits for the pipeline ahead (as outside
// MULTI), so that it runs whole or not at all.
func execPlain(s *Server, c *client) {
	tx := c.tx
	for _, q := range tx.plainQ {
		var body []byte
		switch {
		case string(q[0]) == "eval":
			body = q[1]
		case string(q[0]) == "script" && len(q) == 3 && strings.EqualFold(string(q[1]), "load"):
			body = q[2]
		default:
			continue
		}
		if s.cfg.Catalog.Match(body) != nil {
			continue
		}
		sum := sha1.Sum(body)
		sha := hex.EncodeToString(sum[:])
		if _, _, known := s.understood.Lookup(sha); known {
			continue
		}
		if !s.awaitVerdict(c, body, sha) {
			if !c.deferred {
				c.tx = nil // refused (too many analyses): the error is EXEC's reply
			}
			return
		}
	}
	if c.conn != nil && len(c.slots) > 0 {
		for _, q := range tx.plainQ {
			if overKeys(q[0], q) {
				c.barrier = true
				return
			}
		}
	}
	c.tx = nil
	n := len(tx.plainQ)
	c.local(func(b []byte) []byte { return resp.AppendArrayHeader(b, n) })
	for _, q := range tx.plainQ {
		before := len(c.slots)
		commands[string(q[0])].fn(s, c, q)
		if c.deferred {
			// The script's verdict was forgotten since the check above
			// (many others understood meanwhile): this command fails in
			// its place; the lock command, if another, ran or runs.
			c.deferred = false
			if c.analysis != nil {
				s.understood.Leave(c.analysis)
				c.analysis = nil
			}
			c.slots = c.slots[:before]
			c.errorf("ERR the script's verdict was forgotten while the transaction ran: send the transaction again")
		}
	}
}
