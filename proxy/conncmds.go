package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Connection commands, answered by lockproxy itself: PING, ECHO, QUIT,
// SELECT, AUTH, HELLO, CLIENT, COMMAND.

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
	setName := false
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
			// Checked before AUTH, as Redis does.
			if msg := clientAttrError("Client names", "client name", args[i+1]); msg != "" {
				c.errorf("%s", msg)
				return
			}
			name, setName = args[i+1], true
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
	if setName {
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
		if msg := clientAttrError("Client names", "client name", args[2]); msg != "" {
			c.errorf("%s", msg)
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
		var dst *string
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			dst = &c.lib
		case "lib-ver":
			dst = &c.libVer
		default:
			c.errorf("ERR Unrecognized option '%s'", clip(args[2]))
			return
		}
		// Redis names the attribute as the client spelled it.
		if msg := clientAttrError(string(args[2]), strings.ToLower(string(args[2])), args[3]); msg != "" {
			c.errorf("%s", msg)
			return
		}
		*dst = string(args[3])
		c.status("OK")
	case sub == "info" && len(args) == 2:
		info := s.clientLine(c) + "\n"
		resp3 := c.resp3
		c.local(func(b []byte) []byte { return resp.AppendVerbatim(b, info, resp3) })
	case sub == "no-evict" || sub == "no-touch":
		c.status("OK")
	case sub == "tracking":
		clientTracking(c, args)
	case sub == "caching":
		clientCaching(c, args)
	default:
		// Redis 7.0's "unknown subcommand", which clients that probe for
		// newer subcommands (MAINT_NOTIFICATIONS) tolerate, then what
		// lockproxy answers (not Redis's "Try CLIENT HELP": it has none).
		c.errorf("ERR unknown subcommand '%s'. lockproxy supports CLIENT SETNAME, GETNAME, ID, SETINFO, INFO, TRACKING, CACHING, NO-EVICT and NO-TOUCH", clip(args[1]))
	}
}

// maxClientAttr bounds a client name, lib-name and lib-ver (CLIENT
// SETNAME, HELLO … SETNAME, CLIENT SETINFO). Each is kept for the life of
// the connection, and counted in the input budget (client_query_buffer_total,
// kept.go): without a bound, idle connections could hold a MiB per
// attribute each.
// Redis has none; library names and versions are a few bytes.
const maxClientAttr = 4096

// clientAttrError returns the error a client name, lib-name or lib-ver v
// gets, or "" when v is acceptable. As Redis's validateClientAttr
// (networking.c), every byte must be printable ASCII other than the space
// ('!' to '~'), so that a CLIENT INFO line splits on spaces into its
// fields, and the error is Redis's text with redisName ("Client names",
// or the SETINFO option as the client spelled it). The empty value is
// allowed: it unsets the attribute. what names the attribute in the
// length error.
func clientAttrError(redisName, what string, v []byte) string {
	for _, b := range v {
		if b < '!' || b > '~' {
			return "ERR " + redisName + " cannot contain spaces, newlines or special characters."
		}
	}
	if len(v) > maxClientAttr {
		return fmt.Sprintf("ERR %s of %d bytes is longer than lockproxy's limit of %d bytes", what, len(v), maxClientAttr)
	}
	return ""
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
		c.errorf("ERR unknown subcommand '%s'. lockproxy supports COMMAND, COMMAND COUNT, DOCS, INFO and LIST", clip(args[1]))
	}
}
