package analyze

import (
	"math"
	"strings"
)

func (r *run) get(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeString)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return nilReply
	}
	return bulkReply(e.str)
}

// set is SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT t|KEEPTTL], Redis 7.0.
func (r *run) set(args []string) Reply {
	var nx, xx, get, keep bool
	unit, exp := "", ""
	for i := 3; i < len(args); i++ {
		opt := upperASCII(args[i])
		switch {
		case opt == "NX" && !xx:
			nx = true
		case opt == "XX" && !nx:
			xx = true
		case opt == "GET":
			get = true
		case opt == "KEEPTTL" && unit == "":
			keep = true
		// As in Redis, the same expiry option may repeat (the last wins),
		// two different ones may not.
		case (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") && (unit == "" || unit == opt) && !keep && i+1 < len(args):
			unit, exp = opt, args[i+1]
			i++
		default:
			return syntaxError
		}
	}
	at := int64(0)
	if unit != "" {
		var bad Reply
		if at, bad = r.expireAt(exp, unit == "EX" || unit == "EXAT", unit == "EX" || unit == "PX", "set", false); bad.Type != 0 {
			return bad
		}
	}
	old, wrong := r.lookupType(args[1], typeString)
	if wrong && get {
		return wrongType
	}
	exists := r.lookup(args[1]) != nil
	reply := okReply
	if get {
		reply = nilReply
		if old != nil {
			reply = bulkReply(old.str)
		}
	}
	if (nx && exists) || (xx && !exists) {
		if get {
			return reply
		}
		return nilReply
	}
	e := &entry{typ: typeString, str: args[2], exp: at}
	if keep && exists {
		e.exp = r.lookup(args[1]).exp
	}
	r.db[args[1]] = e
	if at != 0 && at <= r.nowMS() {
		delete(r.db, args[1]) // an absolute time in the past: set, then expired at once
	}
	return reply
}

// expireAt parses an expiry argument as Redis does and returns it as
// absolute unix ms. A relative time is added to now; nonPositive says
// whether zero and negative times are accepted (EXPIRE) or an error (SET).
func (r *run) expireAt(s string, seconds, relative bool, cmd string, nonPositive bool) (int64, Reply) {
	n, ok := parseInt(s)
	if !ok {
		return 0, notInteger
	}
	invalid := errReply("ERR invalid expire time in '" + cmd + "' command")
	if n <= 0 && !nonPositive {
		return 0, invalid
	}
	if seconds {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return 0, invalid
		}
		n *= 1000
	}
	if relative {
		now := r.nowMS()
		if n > math.MaxInt64-now {
			return 0, invalid
		}
		n += now
	}
	return n, Reply{}
}

func (r *run) setnx(args []string) Reply {
	if r.lookup(args[1]) != nil {
		return intReply(0)
	}
	r.db[args[1]] = &entry{typ: typeString, str: args[2]}
	return intReply(1)
}

// setex is SETEX key seconds value and PSETEX key ms value.
func (r *run) setex(args []string) Reply {
	name := lowerASCII(args[0])
	at, bad := r.expireAt(args[2], name == "setex", true, name, false)
	if bad.Type != 0 {
		return bad
	}
	r.db[args[1]] = &entry{typ: typeString, str: args[3], exp: at}
	return okReply
}

// mset is MSET and MSETNX: pairs of key and value, no expiry.
func (r *run) mset(args []string) Reply {
	name := lowerASCII(args[0])
	if len(args)%2 == 0 {
		return arityError(name)
	}
	if name == "msetnx" {
		for i := 1; i < len(args); i += 2 {
			if r.lookup(args[i]) != nil {
				return intReply(0)
			}
		}
	}
	for i := 1; i < len(args); i += 2 {
		r.db[args[i]] = &entry{typ: typeString, str: args[i+1]}
	}
	if name == "msetnx" {
		return intReply(1)
	}
	return okReply
}

func (r *run) mget(args []string) Reply {
	out := Reply{Type: ArrayReply}
	for _, k := range args[1:] {
		e, _ := r.lookupType(k, typeString)
		if e == nil {
			out.Elems = append(out.Elems, nilReply)
		} else {
			out.Elems = append(out.Elems, bulkReply(e.str))
		}
	}
	return out
}

func (r *run) getrange(args []string) Reply {
	start, ok1 := parseInt(args[2])
	end, ok2 := parseInt(args[3])
	if !ok1 || !ok2 {
		return notInteger
	}
	e, wrong := r.lookupType(args[1], typeString)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return bulkReply("")
	}
	n := int64(len(e.str))
	if start < 0 && end < 0 && start > end {
		return bulkReply("")
	}
	if start < 0 {
		start = max(n+start, 0)
	}
	if end < 0 {
		end = max(n+end, 0)
	}
	end = min(end, n-1)
	if start > end || n == 0 {
		return bulkReply("")
	}
	return bulkReply(e.str[start : end+1])
}

func (r *run) strlen(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeString)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return intReply(0)
	}
	return intReply(int64(len(e.str)))
}

// incr is INCR, DECR, INCRBY and DECRBY.
func (r *run) incr(args []string) Reply {
	name := lowerASCII(args[0])
	by := int64(1)
	if len(args) == 3 {
		var ok bool
		if by, ok = parseInt(args[2]); !ok {
			return notInteger
		}
	}
	if strings.HasPrefix(name, "decr") {
		if by == math.MinInt64 {
			return errReply("ERR decrement would overflow")
		}
		by = -by
	}
	e, wrong := r.lookupType(args[1], typeString)
	if wrong {
		return wrongType
	}
	cur := int64(0)
	if e != nil {
		var ok bool
		if cur, ok = parseInt(e.str); !ok {
			return notInteger
		}
	}
	if off, ok := r.bump[args[1]]; ok {
		cur += off // the counter as if it stood higher (counterdiff.go)
		delete(r.bump, args[1])
	}
	if (by > 0 && cur > math.MaxInt64-by) || (by < 0 && cur < math.MinInt64-by) {
		return overflowIncr
	}
	cur += by
	if e == nil {
		e = &entry{typ: typeString}
		r.db[args[1]] = e
	}
	e.str = formatInt(cur)
	return intReply(cur)
}
