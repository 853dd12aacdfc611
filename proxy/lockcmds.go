package proxy

import (
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// setUsage is the hint appended to every refused SET.
const setUsage = "lockproxy accepts SET key token NX PX|EX|PXAT|EXAT ttl (a lock: NX and an expiry, in any order), and SET key token XX with an expiry (an extend of the caller's lock)"

// setOpts is a parsed SET.
type setOpts struct {
	nx, xx   bool
	unit     quorum.TTLUnit
	ttlValue int64
}

// parseSet parses the options of SET key value [options…] as Redis 7.0
// does (t_string.c): NX and XX may be repeated but not mixed; an expiry
// option repeated takes its last value, and only that one is read as an
// integer; two kinds of expiry are a syntax error. It returns an error
// message for the client, or "" when args is a lock acquisition (NX) or an
// extend (XX with an expiry).
func parseSet(args [][]byte) (setOpts, string) {
	var o setOpts
	var ttl []byte
	for i := 3; i < len(args); i++ {
		var buf [16]byte
		opt := string(lowerName(&buf, args[i]))
		switch opt {
		case "nx", "xx":
			if (opt == "nx" && o.xx) || (opt == "xx" && o.nx) {
				return o, "ERR syntax error: NX and XX together; " + setUsage
			}
			o.nx, o.xx = o.nx || opt == "nx", o.xx || opt == "xx"
		case "get":
			return o, "ERR SET GET is not supported: " + setUsage
		case "keepttl":
			return o, "ERR SET KEEPTTL is not a lock acquisition: " + setUsage
		case "px", "ex", "pxat", "exat":
			if u := ttlUnits[opt]; o.unit != 0 && o.unit != u {
				return o, "ERR syntax error: two kinds of expiry given; " + setUsage
			}
			if i+1 >= len(args) {
				return o, "ERR syntax error: " + strings.ToUpper(opt) + " needs a value; " + setUsage
			}
			o.unit, ttl = ttlUnits[opt], args[i+1]
			i++
		default:
			return o, "ERR syntax error: unknown SET option '" + clip(args[i]) + "'; " + setUsage
		}
	}
	if o.unit != 0 {
		v, ok := resp.ParseRedisInt(ttl)
		if !ok {
			return o, "ERR value is not an integer or out of range"
		}
		if v <= 0 {
			return o, "ERR invalid expire time in 'set' command"
		}
		o.ttlValue = v
	}
	if o.xx && o.unit == 0 {
		// In Redis it would also drop the key's expiry.
		return o, "ERR SET XX without an expiry would leave the lock without one: add PX ms; " + setUsage
	}
	if !o.nx && !o.xx {
		return o, "ERR SET without NX is not a lock acquisition: " + setUsage
	}
	return o, ""
}

// ttlUnits maps SET's expiry options (lower case) to their unit.
var ttlUnits = map[string]quorum.TTLUnit{"px": quorum.Millis, "ex": quorum.Seconds, "pxat": quorum.UnixMillis, "exat": quorum.UnixSecs}

func cmdSet(s *Server, c *client, args [][]byte) {
	t0 := evloop.Now()
	o, msg := parseSet(args)
	if msg != "" {
		c.errorf("%s", msg)
		s.cfg.Metrics.Request("set", "error")
		return
	}
	if o.xx {
		setExtend(s, c, t0, args[1], args[2], o)
		return
	}
	var ttl time.Duration
	if o.unit == 0 {
		if s.cfg.DefaultTTL == 0 {
			c.errorf("ERR SET NX without an expiry is refused: a lock that never expires is lost for good with its holder; add PX ms, or set default_ttl in config.toml")
			s.cfg.Metrics.Request("set", "error")
			return
		}
		ttl = s.cfg.DefaultTTL
	} else if ttl, msg = s.accountedTTL(o.ttlValue, o.unit); msg != "" {
		c.errorf("%s", msg)
		s.cfg.Metrics.Request("set", "error")
		return
	}
	s.acquire(c, t0, args[1], args[2], ttl, renderReply)
}

// setExtend serves SET key token XX PX ttl, which lock libraries send to
// renew a lock (redis-mutex): an extend of the key where it holds token,
// with validity accounted, answered +OK, or nil where the key is not held
// by token. That is where it departs from Redis, which would overwrite
// another holder's value: lockproxy never hands a held lock to a
// stranger, and a caller renewing its own lock sees no difference.
func setExtend(s *Server, c *client, t0 int64, key, token []byte, o setOpts) {
	ttl, msg := s.accountedTTL(o.ttlValue, o.unit)
	if msg != "" {
		c.errorf("%s", msg)
		s.cfg.Metrics.Request("set", "error")
		return
	}
	s.submit(c, s.cfg.Engine.ExtendHeld(key, token, ttl, t0), renderOKNil)
	s.keyEvent(c, pubsub.EventExpire, ttl, key)
}

func cmdSetNX(s *Server, c *client, args [][]byte) {
	t0 := evloop.Now()
	if s.cfg.DefaultTTL == 0 {
		c.errorf("ERR SETNX is refused: it sets no expiry, and a lock that never expires is lost for good with its holder; use SET key token NX PX ms, or set default_ttl in config.toml")
		s.cfg.Metrics.Request("setnx", "error")
		return
	}
	s.acquire(c, t0, args[1], args[2], s.cfg.DefaultTTL, renderSetNX)
}

// acquire submits SET key token NX PX ttl as a quorum acquisition; ttl
// leaves validity (accountedTTL, or default_ttl checked by New).
func (s *Server) acquire(c *client, t0 int64, key, token []byte, ttl time.Duration, kind renderKind) {
	s.submit(c, s.cfg.Engine.Acquire(key, token, ttl, t0), kind)
	s.keyEvent(c, pubsub.EventSet, ttl, key)
}

func cmdGet(s *Server, c *client, args [][]byte) {
	kind := renderReply
	if c.tx != nil && c.tx.watched[string(args[1])] != nil {
		kind = renderWatchedGet // what EXEC compares with (transaction.go)
	}
	s.submit(c, s.cfg.Engine.Get(args[1], evloop.Now()), kind)
	c.charge += valueReplyCharge
}

// cmdHGet and cmdHExists read a hash lock's field by quorum (Redisson's
// getHoldCount and isHeldByCurrentThread).
func cmdHGet(s *Server, c *client, args [][]byte) {
	s.submit(c, s.cfg.Engine.HGet(args[1], args[2], evloop.Now()), renderReply)
	c.charge += valueReplyCharge
}

func cmdHExists(s *Server, c *client, args [][]byte) {
	s.submit(c, s.cfg.Engine.HExists(args[1], args[2], evloop.Now()), renderBulkIsOne)
}

func cmdPTTL(s *Server, c *client, args [][]byte) {
	kind := renderReply
	if len(args[0]) == 3 { // TTL
		kind = renderTTLSecs
	}
	s.submit(c, s.cfg.Engine.PTTL(args[1], evloop.Now()), kind)
}

// maxCommandKeys bounds the keys of one DEL, EXISTS or script. Each key is
// a step of the script or command every master runs, and while one master
// is busy with a command every other client's request on that master
// waits behind it: 65,535 keys kept each master busy past node_timeout,
// and other clients' locks failed with NOQUORUM. Lock libraries name a
// handful of keys.
const maxCommandKeys = 1024

// tooManyKeys answers a command naming more than maxCommandKeys keys, and
// reports whether it did.
func tooManyKeys(c *client, cmd []byte, n int) bool {
	if n <= maxCommandKeys {
		return false
	}
	c.errorf("ERR %s through lockproxy names at most %d keys (got %d): every master runs it at once, and a long one holds up every other client's locks; split it", strings.ToUpper(string(cmd)), maxCommandKeys, n)
	return true
}

func cmdExists(s *Server, c *client, args [][]byte) {
	if tooManyKeys(c, args[0], len(args)-1) {
		return
	}
	s.submit(c, s.cfg.Engine.Exists(args[1:], evloop.Now()), renderReply)
}

func cmdDel(s *Server, c *client, args [][]byte) {
	if tooManyKeys(c, args[0], len(args)-1) {
		return
	}
	s.submit(c, s.cfg.Engine.Del(args[1:], evloop.Now()), renderReply)
	if s.keyEvent(c, pubsub.EventDel, 0, args[1:]...); len(c.slots) > 0 && c.slots[len(c.slots)-1].ev != nil {
		c.slots[len(c.slots)-1].ev.counted = true
	}
}

// expireOptions refuses Redis 7's options of PEXPIRE and EXPIRE (NX, XX,
// GT, LT), which each master would apply to its own copy of the lock, so
// that the copies' expiries part and no one TTL is left to account; an
// option Redis does not know gets Redis's error. Redis reads the options
// before the TTL, and so does lockproxy.
func expireOptions(args [][]byte) string {
	for _, a := range args[3:] {
		var buf [16]byte
		switch string(lowerName(&buf, a)) {
		case "nx", "xx", "gt", "lt":
		default:
			return "ERR Unsupported option " + clip(a)
		}
	}
	if len(args) > 3 {
		return "ERR " + strings.ToUpper(string(args[0])) + " with its NX, XX, GT and LT options is not supported by lockproxy: each master would apply the option to its own copy of the lock; send " + strings.ToUpper(string(args[0])) + " key ttl without them (a lock always has an expiry, so XX changes nothing there)"
	}
	return ""
}

// cmdExpire is the quorum extend of legacy SETNX+EXPIRE code: PEXPIRE on
// every master, yes when a quorum had the key, with validity accounted.
func cmdExpire(s *Server, c *client, args [][]byte) {
	t0 := evloop.Now()
	unit := quorum.Millis
	if len(args[0]) == 6 { // EXPIRE
		unit = quorum.Seconds
	}
	if msg := expireOptions(args); msg != "" {
		c.errorf("%s", msg)
		return
	}
	v, ok := resp.ParseRedisInt(args[2])
	if !ok {
		c.errorf("ERR value is not an integer or out of range")
		return
	}
	if v <= 0 {
		c.errorf("ERR invalid expire time: lockproxy extends locks with a positive TTL; release a lock with its release script or DEL")
		return
	}
	ttl, msg := s.accountedTTL(v, unit)
	if msg != "" {
		c.errorf("%s", msg)
		return
	}
	s.submit(c, s.cfg.Engine.Extend(args[1], ttl, t0), renderSetNX) // granted → 1, else 0
	s.keyEvent(c, pubsub.EventExpire, ttl, args[1])
}
