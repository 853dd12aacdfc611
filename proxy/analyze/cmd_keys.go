package analyze

import (
	"fmt"
	"strings"
)

func (r *run) del(args []string) Reply {
	n := int64(0)
	for _, k := range args[1:] {
		if r.lookup(k) != nil {
			delete(r.db, k)
			n++
		}
	}
	return intReply(n)
}

func (r *run) exists(args []string) Reply {
	n := int64(0)
	for _, k := range args[1:] {
		if r.lookup(k) != nil {
			n++
		}
	}
	return intReply(n)
}

// expire is EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT with Redis 7's NX, XX,
// GT and LT.
func (r *run) expire(args []string) Reply {
	name := lowerASCII(args[0])
	var nx, xx, gt, lt bool
	for _, o := range args[3:] {
		switch upperASCII(o) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			return errReply("ERR Unsupported option " + o)
		}
	}
	switch {
	case nx && (xx || gt || lt):
		return errReply("ERR NX and XX, GT or LT options at the same time are not compatible")
	case gt && lt:
		return errReply("ERR GT and LT options at the same time are not compatible")
	}
	at, bad := r.expireAt(args[2], !strings.HasPrefix(name, "p"), !strings.HasSuffix(name, "at"), name, true)
	if bad.Type != 0 {
		return bad
	}
	e := r.lookup(args[1])
	if e == nil {
		return intReply(0)
	}
	switch {
	case nx && e.exp != 0, xx && e.exp == 0,
		gt && (e.exp == 0 || at <= e.exp), lt && e.exp != 0 && at >= e.exp:
		return intReply(0)
	}
	if at <= r.nowMS() {
		delete(r.db, args[1])
		return intReply(1)
	}
	e.exp = at
	return intReply(1)
}

func (r *run) persist(args []string) Reply {
	e := r.lookup(args[1])
	if e == nil || e.exp == 0 {
		return intReply(0)
	}
	e.exp = 0
	return intReply(1)
}

// ttl is TTL and PTTL: -2 for a missing key, -1 without expiry, else the
// time left (seconds rounded as Redis rounds them).
func (r *run) ttl(args []string) Reply {
	e := r.lookup(args[1])
	switch {
	case e == nil:
		return intReply(-2)
	case e.exp == 0:
		return intReply(-1)
	}
	left := max(e.exp-r.nowMS(), 0)
	if lowerASCII(args[0]) == "ttl" {
		return intReply((left + 500) / 1000)
	}
	return intReply(left)
}

func (r *run) typeOf(args []string) Reply {
	t := "none"
	if e := r.lookup(args[1]); e != nil {
		t = e.typ.String()
	}
	return Reply{Type: StatusReply, Str: t}
}

// time answers TIME with the model's clock; the analysis checks, by
// probing with two clocks, that the clock only moves expiries.
func (r *run) time([]string) Reply {
	r.clockRead = true
	return arrayReply(bulkReply(formatInt(r.nowUS/1e6)), bulkReply(formatInt(r.nowUS%1e6)))
}

// selectDB accepts database 0. A database number taken from an argument is
// recorded, and the analysis reruns with that argument set to 0; the
// caller must then require 0 there.
func (r *run) selectDB(args []string) Reply {
	if p := r.pos(args[1]); p >= 0 && r.vals[p] != "0" {
		if r.dbArg < 0 {
			r.dbArg = p
		}
		return okReply
	}
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		return notInteger
	case n != 0:
		return r.fail(ClassDatabase, args, args[1], fmt.Sprintf("SELECT %d: lockproxy serves database 0 only", n))
	}
	return okReply
}

func (r *run) publish([]string) Reply { return intReply(0) }
