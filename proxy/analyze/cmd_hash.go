package analyze

import "math"

func (r *run) hget(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeHash)
	if wrong {
		return wrongType
	}
	if e != nil {
		if v, ok := e.hget(args[2]); ok {
			return bulkReply(v)
		}
	}
	return nilReply
}

func (r *run) hmget(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeHash)
	if wrong {
		return wrongType
	}
	out := Reply{Type: ArrayReply}
	for _, f := range args[2:] {
		v, ok := "", false
		if e != nil {
			v, ok = e.hget(f)
		}
		if ok {
			out.Elems = append(out.Elems, bulkReply(v))
		} else {
			out.Elems = append(out.Elems, nilReply)
		}
	}
	return out
}

// hset is HSET and HMSET (pairs of field and value) and HSETNX.
func (r *run) hset(args []string) Reply {
	name := lowerASCII(args[0])
	if len(args)%2 != 0 {
		return arityError(name)
	}
	e, wrong := r.create(args[1], typeHash)
	if wrong {
		return wrongType
	}
	if name == "hsetnx" {
		if _, ok := e.hget(args[2]); ok {
			return intReply(0)
		}
		e.hset(args[2], args[3])
		return intReply(1)
	}
	n := int64(0)
	for i := 2; i < len(args); i += 2 {
		if e.hset(args[i], args[i+1]) {
			n++
		}
	}
	if name == "hmset" {
		return okReply
	}
	return intReply(n)
}

func (r *run) hdel(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeHash)
	if wrong {
		return wrongType
	}
	n := int64(0)
	if e != nil {
		for _, f := range args[2:] {
			if e.hdel(f) {
				n++
			}
		}
		r.dropIfEmpty(args[1], e)
	}
	return intReply(n)
}

func (r *run) hexists(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeHash)
	if wrong {
		return wrongType
	}
	if e != nil {
		if _, ok := e.hget(args[2]); ok {
			return intReply(1)
		}
	}
	return intReply(0)
}

func (r *run) hincrby(args []string) Reply {
	by, ok := parseInt(args[3])
	if !ok {
		return notInteger
	}
	e, wrong := r.create(args[1], typeHash)
	if wrong {
		return wrongType
	}
	cur := int64(0)
	if v, found := e.hget(args[2]); found {
		if cur, ok = parseInt(v); !ok {
			r.dropIfEmpty(args[1], e)
			return errReply("ERR hash value is not an integer")
		}
	}
	if (by > 0 && cur > math.MaxInt64-by) || (by < 0 && cur < math.MinInt64-by) {
		r.dropIfEmpty(args[1], e)
		return overflowIncr
	}
	e.hset(args[2], formatInt(cur+by))
	return intReply(cur + by)
}

func (r *run) hlen(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeHash)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return intReply(0)
	}
	return intReply(int64(len(e.hash)))
}

// hgetall is HGETALL, HKEYS and HVALS.
func (r *run) hgetall(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeHash)
	if wrong {
		return wrongType
	}
	name := lowerASCII(args[0])
	out := Reply{Type: ArrayReply}
	if e != nil {
		for _, f := range e.hash {
			if name != "hvals" {
				out.Elems = append(out.Elems, bulkReply(f.f))
			}
			if name != "hkeys" {
				out.Elems = append(out.Elems, bulkReply(f.v))
			}
		}
	}
	return out
}
