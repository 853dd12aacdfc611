package proxy

import (
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/quorum"
)

// setUsage is the hint appended to every refused SET.
const setUsage = "lockproxy accepts SET key token NX PX|EX|PXAT|EXAT ttl (a lock: NX and an expiry, in any order)"

// setOpts is a parsed SET.
type setOpts struct {
	nx       bool
	unit     quorum.TTLUnit
	ttlValue int64
}

// parseSet parses the options of SET key value [options…]. It returns an
// error message for the client, or "" when args is a lock acquisition.
func parseSet(args [][]byte) (setOpts, string) {
	var o setOpts
	for i := 3; i < len(args); i++ {
		var buf [16]byte
		opt := string(lowerName(&buf, args[i]))
		switch opt {
		case "nx":
			if o.nx {
				return o, "ERR syntax error: NX given twice; " + setUsage
			}
			o.nx = true
		case "xx":
			return o, "ERR SET XX is not a lock acquisition: " + setUsage
		case "get":
			return o, "ERR SET GET is not supported: " + setUsage
		case "keepttl":
			return o, "ERR SET KEEPTTL is not a lock acquisition: " + setUsage
		case "px", "ex", "pxat", "exat":
			if o.unit != 0 {
				return o, "ERR syntax error: more than one expiry given; " + setUsage
			}
			if i+1 >= len(args) {
				return o, "ERR syntax error: " + strings.ToUpper(opt) + " needs a value; " + setUsage
			}
			v, err := strconv.ParseInt(string(args[i+1]), 10, 64)
			if err != nil {
				return o, "ERR value is not an integer or out of range"
			}
			if v <= 0 {
				return o, "ERR invalid expire time in 'set' command"
			}
			o.ttlValue = v
			o.unit = ttlUnits[opt]
			i++
		default:
			return o, "ERR syntax error: unknown SET option '" + clip(args[i]) + "'; " + setUsage
		}
	}
	if !o.nx {
		return o, "ERR SET without NX is not a lock acquisition: " + setUsage
	}
	return o, ""
}

// ttlUnits maps SET's expiry options (lower case) to their unit.
var ttlUnits = map[string]quorum.TTLUnit{"px": quorum.Millis, "ex": quorum.Seconds, "pxat": quorum.UnixMillis, "exat": quorum.UnixSecs}

func cmdSet(s *Server, c *client, args [][]byte) {
	t0 := batching.Now()
	o, msg := parseSet(args)
	if msg != "" {
		c.errorf("%s", msg)
		s.cfg.Metrics.request("set", "error")
		return
	}
	var ttl time.Duration
	if o.unit == 0 {
		if s.cfg.DefaultTTL == 0 {
			c.errorf("ERR SET NX without an expiry is refused: a lock that never expires is lost for good with its holder; add PX ms, or set default_ttl in config.toml")
			s.cfg.Metrics.request("set", "error")
			return
		}
		ttl = s.cfg.DefaultTTL
	} else if ttl, msg = s.accountedTTL(o.ttlValue, o.unit); msg != "" {
		c.errorf("%s", msg)
		s.cfg.Metrics.request("set", "error")
		return
	}
	s.acquire(c, t0, args[1], args[2], ttl, renderReply)
}

func cmdSetNX(s *Server, c *client, args [][]byte) {
	t0 := batching.Now()
	if s.cfg.DefaultTTL == 0 {
		c.errorf("ERR SETNX is refused: it sets no expiry, and a lock that never expires is lost for good with its holder; use SET key token NX PX ms, or set default_ttl in config.toml")
		s.cfg.Metrics.request("setnx", "error")
		return
	}
	s.acquire(c, t0, args[1], args[2], s.cfg.DefaultTTL, renderSetNX)
}

// acquire submits SET key token NX PX ttl as a quorum acquisition; ttl
// leaves validity (accountedTTL, or default_ttl checked by New).
func (s *Server) acquire(c *client, t0 int64, key, token []byte, ttl time.Duration, kind renderKind) {
	r := quorum.NewRequest()
	cmd, k, tok := appendSetNX(r.CmdBuffer(96+len(key)+len(token)), key, token, ttl.Milliseconds())
	r.Kind, r.Agg, r.Rule = quorum.Acquire, quorum.AggVote, quorum.YesOK
	r.Key = unsafe.String(unsafe.SliceData(k), len(k))
	r.NKeys, r.Cmd = 1, cmd
	r.UndoKeys, r.UndoToken = r.OneUndoKey(k), tok
	r.Exclusive, r.NilIsNoop = true, true
	r.TTL, r.NoReply, r.T0 = ttl, batching.ReplyNil, t0
	s.submit(c, r, kind)
}

// appendSetNX appends SET key token NX PX ms, encoded, to dst, and returns
// it with the key and the token as slices of it (they alias the command:
// no copies).
func appendSetNX(dst, key, token []byte, ms int64) (cmd, k, tok []byte) {
	dst = append(dst, "*6\r\n$3\r\nSET\r\n"...)
	dst = batching.AppendBulk(dst, key)
	ko := len(dst) - len(key) - 2
	dst = batching.AppendBulk(dst, token)
	to := len(dst) - len(token) - 2
	dst = append(dst, "$2\r\nNX\r\n$2\r\nPX\r\n"...)
	var digits [20]byte
	dst = batching.AppendBulk(dst, strconv.AppendInt(digits[:0], ms, 10))
	return dst, dst[ko : ko+len(key) : ko+len(key)], dst[to : to+len(token) : to+len(token)]
}

// argsIn returns argument i of an encoded command (which we encoded, so it
// is well formed).
func argsIn(cmd []byte, i int) []byte {
	p := 0
	skipLine := func() int {
		start := p
		for cmd[p] != '\r' {
			p++
		}
		p += 2
		return start
	}
	skipLine() // *n
	for j := 0; ; j++ {
		st := skipLine() // $len
		l, _ := strconv.Atoi(string(cmd[st+1 : p-2]))
		if j == i {
			return cmd[p : p+l : p+l]
		}
		p += l + 2
	}
}

func cmdGet(s *Server, c *client, args [][]byte) {
	// Keyed, so that it runs after whatever this connection sent earlier
	// on the key and is still waiting for its turn.
	s.submit(c, &quorum.Request{
		Kind: quorum.Read, Agg: quorum.AggValue, NKeys: 1, Key: string(args[1]),
		Cmd: batching.AppendCommand(nil, []byte("GET"), args[1]), T0: batching.Now(),
	}, renderReply)
}

func cmdPTTL(s *Server, c *client, args [][]byte) {
	kind := renderReply
	if len(args[0]) == 3 { // TTL
		kind = renderTTLSecs
	}
	s.submit(c, &quorum.Request{
		Kind: quorum.Read, Agg: quorum.AggValueTTL, NKeys: 1, Key: string(args[1]),
		Cmd: quorum.GetTTLCommand(args[1]), T0: batching.Now(),
	}, kind)
}

func cmdExists(s *Server, c *client, args [][]byte) {
	s.submitKeys(c, quorum.Read, quorum.ExistsCommand(args[1:]), args[1:])
}

func cmdDel(s *Server, c *client, args [][]byte) {
	s.submitKeys(c, quorum.Release, quorum.DelCommand(args[1:]), args[1:])
}

// submitKeys submits a per-key command (EXISTS, DEL): the reply counts the
// keys a quorum reported. A single key is serialized with the connection's
// other commands on it.
func (s *Server) submitKeys(c *client, kind quorum.Kind, cmd []byte, keys [][]byte) {
	r := &quorum.Request{Kind: kind, Agg: quorum.AggKeys, NKeys: len(keys), Cmd: cmd, T0: batching.Now()}
	if len(keys) == 1 {
		r.Key = string(keys[0])
	}
	s.submit(c, r, renderReply)
}

// cmdExpire is the quorum extend of legacy SETNX+EXPIRE code: PEXPIRE on
// every master, yes when a quorum had the key, with validity accounted.
func cmdExpire(s *Server, c *client, args [][]byte) {
	t0 := batching.Now()
	unit := quorum.Millis
	if len(args[0]) == 6 { // EXPIRE
		unit = quorum.Seconds
	}
	v, err := strconv.ParseInt(string(args[2]), 10, 64)
	if err != nil {
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
	ms := strconv.AppendInt(nil, ttl.Milliseconds(), 10)
	s.submit(c, &quorum.Request{
		Kind: quorum.Extend, Agg: quorum.AggVote, Rule: quorum.YesOne,
		Key: string(args[1]), NKeys: 1,
		Cmd: batching.AppendCommand(nil, []byte("PEXPIRE"), args[1], ms),
		TTL: ttl, NoReply: batching.Reply{Type: batching.Integer, Int: 0}, T0: t0,
	}, renderReply)
}
