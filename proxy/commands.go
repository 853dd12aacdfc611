package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strconv"
	"strings"
	"time"

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
		"del":     {fn: cmdDel, arity: -2},
		"unlink":  {fn: cmdDel, arity: -2},
		"pexpire": {fn: cmdExpire, arity: 3},
		"expire":  {fn: cmdExpire, arity: 3},
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
		c.errorf("ERR unknown or unsupported command '%s': lockproxy serves lock commands only (SET NX PX, EVAL/EVALSHA of lock scripts, GET, PTTL, DEL, PEXPIRE…); see README", clip(args[0]))
		s.cfg.Metrics.Request("unsupported", "error")
		return
	}
	if !c.authed && !spec.open {
		c.errorf("%s Authentication required.", errPrefixNoAuth)
		return
	}
	if (spec.arity > 0 && len(args) != spec.arity) || (spec.arity < 0 && len(args) < -spec.arity) {
		c.errorf("ERR wrong number of arguments for '%s' command", string(name)) // a copy: name is on the stack
		return
	}
	if msg := subscribedRefusal(c, name); msg != "" {
		c.errorf("%s", msg)
		return
	}
	spec.fn(s, c, args)
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
	renderLocal   renderKind = iota // bytes already encoded in c.out
	renderReply                     // the quorum reply as it is
	renderSetNX                     // OK → :1, anything else → :0
	renderTTLSecs                   // a PTTL in ms → TTL in s
	renderPublish                   // the receivers of a PUBLISH over the masters' counts
	renderBlocked                   // a BLPOP's answer (blk.reply)
)

// slot is one command's place in the pipeline's replies.
type slot struct {
	req      *quorum.Request
	kind     renderKind
	resp3    bool
	off, end int          // renderLocal: c.localBuf[off:end]
	ev       *slotEvent   // what its decision tells the other proxies (events.go)
	pub      *publishSlot // renderPublish
	blk      *blocker     // renderBlocked
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
		c.slots[i] = slot{}
	}
	c.slots = c.slots[:0]
}

// render appends slot sl's reply to out.
func (s *Server) render(out []byte, c *client, sl *slot) []byte {
	switch sl.kind {
	case renderLocal:
		return append(out, c.localBuf[sl.off:sl.end]...)
	case renderBlocked:
		return append(out, sl.blk.reply...)
	case renderPublish:
		return s.renderPublished(out, sl)
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
	case renderTTLSecs:
		if rep.Type == resp.Integer && rep.Int > 0 {
			return resp.AppendInt(out, rep.Int/1000)
		}
	}
	return resp.AppendReply(out, rep, sl.resp3)
}

func cmdPing(s *Server, c *client, args [][]byte) {
	if c.subs > 0 && !c.resp3 && len(args) <= 2 {
		pingSubscribed(c, args)
		return
	}
	switch len(args) {
	case 1:
		c.status("PONG")
	case 2:
		c.bulk(args[1])
	default:
		c.errorf("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(s *Server, c *client, args [][]byte) { c.bulk(args[1]) }

func cmdQuit(s *Server, c *client, args [][]byte) {
	c.status("OK")
	c.quit = true
}

func cmdSelect(s *Server, c *client, args [][]byte) {
	if n, err := strconv.Atoi(string(args[1])); err != nil || n != 0 {
		c.errorf("ERR DB index is out of range (lockproxy has only database 0)")
		return
	}
	c.status("OK")
}

// checkPass compares in constant time, also in the password's length:
// both sides are hashed first. A failure is counted for INFO and /metrics.
func (s *Server) checkPass(user, pass []byte) bool {
	given := sha256.Sum256(pass)
	want := sha256.Sum256([]byte(s.cfg.RequirePass))
	ok := subtle.ConstantTimeCompare(given[:], want[:]) == 1
	if user != nil && string(user) != "default" {
		ok = false
	}
	if !ok {
		s.cfg.Metrics.AuthFailure()
	}
	return ok
}

func cmdAuth(s *Server, c *client, args [][]byte) {
	if len(args) > 3 {
		c.errorf("ERR syntax error")
		return
	}
	var user []byte
	if len(args) == 3 {
		user = args[1]
	}
	if s.cfg.RequirePass == "" {
		if string(user) == "default" {
			// As Redis: without a password the default user is "nopass"
			// and accepts any.
			c.status("OK")
			return
		}
		c.errorf("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	if !s.checkPass(user, args[len(args)-1]) {
		c.errorf("%s invalid username-password pair or user is disabled.", errPrefixWrongPwd)
		return
	}
	c.authed = true
	c.status("OK")
}

// cmdHello: HELLO [protover [AUTH user pass] [SETNAME name]].
func cmdHello(s *Server, c *client, args [][]byte) {
	proto := 2
	if c.resp3 {
		proto = 3
	}
	if len(args) >= 2 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil || v < 2 || v > 3 {
			c.errorf("NOPROTO unsupported protocol version")
			return
		}
		proto = v
	}
	var name []byte
	authed := c.authed
	for i := 2; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "auth":
			if i+2 >= len(args) {
				c.errorf("ERR Syntax error in HELLO option 'auth'")
				return
			}
			nopass := s.cfg.RequirePass == "" && string(args[i+1]) == "default" // as Redis
			if !nopass && (s.cfg.RequirePass == "" || !s.checkPass(args[i+1], args[i+2])) {
				c.errorf("%s invalid username-password pair or user is disabled.", errPrefixWrongPwd)
				return
			}
			authed = true
			i += 2
		case "setname":
			if i+1 >= len(args) {
				c.errorf("ERR Syntax error in HELLO option 'setname'")
				return
			}
			name = args[i+1]
			i++
		default:
			c.errorf("ERR Syntax error in HELLO option '%s'", clip(args[i]))
			return
		}
	}
	if !authed {
		c.errorf("%s HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time", errPrefixNoAuth)
		return
	}
	c.authed = true
	c.resp3 = proto == 3
	if name != nil {
		c.name = string(name)
	}
	id := c.id
	resp3 := c.resp3
	c.local(func(b []byte) []byte {
		b = resp.AppendMapHeader(b, 7, resp3)
		b = resp.AppendBulkString(b, "server")
		b = resp.AppendBulkString(b, "redis")
		b = resp.AppendBulkString(b, "version")
		b = resp.AppendBulkString(b, redisCompatVersion)
		b = resp.AppendBulkString(b, "proto")
		b = resp.AppendInt(b, int64(proto))
		b = resp.AppendBulkString(b, "id")
		b = resp.AppendInt(b, id)
		b = resp.AppendBulkString(b, "mode")
		b = resp.AppendBulkString(b, "standalone")
		b = resp.AppendBulkString(b, "role")
		b = resp.AppendBulkString(b, "master")
		b = resp.AppendBulkString(b, "modules")
		return resp.AppendArrayHeader(b, 0)
	})
}

// redisCompatVersion is the Redis version whose commands lockproxy speaks;
// clients read it from HELLO and INFO to pick features.
const redisCompatVersion = "7.0.0"

func cmdClient(s *Server, c *client, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "setname" && len(args) == 3:
		if bytes.ContainsAny(args[2], " \n\r") {
			c.errorf("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.name = string(args[2])
		c.status("OK")
	case sub == "getname" && len(args) == 2:
		if c.name == "" {
			resp3 := c.resp3
			c.local(func(b []byte) []byte { return resp.AppendNull(b, resp3) })
			return
		}
		c.bulk([]byte(c.name))
	case sub == "id" && len(args) == 2:
		c.integer(c.id)
	case sub == "setinfo" && len(args) == 4:
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			c.lib = string(args[3])
		case "lib-ver":
			c.libVer = string(args[3])
		default:
			c.errorf("ERR Unrecognized option '%s'", clip(args[2]))
			return
		}
		c.status("OK")
	case sub == "info" && len(args) == 2:
		info := s.clientLine(c) + "\n"
		resp3 := c.resp3
		c.local(func(b []byte) []byte { return resp.AppendVerbatim(b, info, resp3) })
	case sub == "no-evict" || sub == "no-touch":
		c.status("OK")
	case sub == "tracking":
		// Client-side caching would serve a lock's value from the
		// client's cache, never asking the quorum; a client that asks
		// for it fails to connect, so say how to turn it off.
		c.errorf("ERR CLIENT TRACKING is not supported: lockproxy has no client-side caching, every read is a quorum read; turn caching off in the client (rueidis: ClientOption{DisableCache: true})")
	default:
		// What Redis 7.0 answers; clients that probe for newer
		// subcommands (MAINT_NOTIFICATIONS) tolerate it.
		c.errorf("ERR unknown subcommand '%s'. Try CLIENT HELP.", clip(args[1]))
	}
}

func (s *Server) clientLine(c *client) string {
	return fmt.Sprintf("id=%d addr=%s name=%s age=%d resp=%d lib-name=%s lib-ver=%s",
		c.id, c.addr, c.name, int(time.Since(c.since).Seconds()), map[bool]int{false: 2, true: 3}[c.resp3], c.lib, c.libVer)
}

func cmdCommand(s *Server, c *client, args [][]byte) {
	if len(args) == 1 {
		c.local(func(b []byte) []byte { return resp.AppendArrayHeader(b, 0) })
		return
	}
	switch strings.ToLower(string(args[1])) {
	case "count":
		c.integer(int64(len(commands)))
	case "docs", "info", "list":
		// No per-command documentation: clients (redis-cli hints) do
		// without it.
		resp3 := c.resp3
		sub := strings.ToLower(string(args[1]))
		c.local(func(b []byte) []byte {
			if sub == "docs" {
				return resp.AppendMapHeader(b, 0, resp3)
			}
			return resp.AppendArrayHeader(b, 0)
		})
	default:
		c.errorf("ERR unknown subcommand '%s'. Try COMMAND HELP.", clip(args[1]))
	}
}
