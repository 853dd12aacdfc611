package analyze

import "strings"

// zaddFlags are ZADD's options.
type zaddFlags struct{ nx, xx, gt, lt, ch, incr bool }

// zaddParse reads ZADD's options and its score/member pairs, checked as
// Redis checks them.
func zaddParse(args []string) (zaddFlags, []string, []float64, Reply) {
	var f zaddFlags
	i := 2
options:
	for ; i < len(args); i++ {
		switch upperASCII(args[i]) {
		case "NX":
			f.nx = true
		case "XX":
			f.xx = true
		case "GT":
			f.gt = true
		case "LT":
			f.lt = true
		case "CH":
			f.ch = true
		case "INCR":
			f.incr = true
		default:
			break options
		}
	}
	rest := args[i:]
	switch {
	case len(rest) == 0 || len(rest)%2 != 0:
		return f, nil, nil, syntaxError
	case f.nx && f.xx:
		return f, nil, nil, errReply("ERR XX and NX options at the same time are not compatible")
	case (f.gt && f.nx) || (f.lt && f.nx) || (f.gt && f.lt):
		return f, nil, nil, errReply("ERR GT, LT, and/or NX options at the same time are not compatible")
	case f.incr && len(rest) > 2:
		return f, nil, nil, errReply("ERR INCR option supports a single increment-element pair")
	}
	scores := make([]float64, len(rest)/2)
	for j := range scores {
		s, ok := parseScore(rest[2*j])
		if !ok {
			return f, nil, nil, notFloat
		}
		scores[j] = s
	}
	return f, rest, scores, Reply{}
}

// zadd is ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ….
func (r *run) zadd(args []string) Reply {
	f, rest, scores, bad := zaddParse(args)
	if bad.Type != 0 {
		return bad
	}
	e, wrong := r.lookupType(args[1], typeZSet)
	switch {
	case wrong:
		return wrongType
	case e == nil && f.xx && f.incr:
		return nilReply
	case e == nil && f.xx:
		return intReply(0)
	case e == nil:
		e = &entry{typ: typeZSet}
		r.db[args[1]] = e
	}
	added, changed := int64(0), int64(0)
	for j, s := range scores {
		m := rest[2*j+1]
		old, exists := e.zscore(m)
		if f.incr && exists {
			if s += old; s != s {
				return errReply("ERR resulting score is not a number (NaN)")
			}
		}
		switch {
		case exists && f.nx, !exists && f.xx, exists && f.gt && s <= old, exists && f.lt && s >= old:
			if f.incr {
				r.dropIfEmpty(args[1], e)
				return nilReply
			}
			continue
		}
		if e.zadd(m, s) {
			added++
		} else if s != old {
			changed++
		}
		if f.incr {
			return bulkReply(formatScore(s))
		}
	}
	r.dropIfEmpty(args[1], e)
	if f.ch {
		return intReply(added + changed)
	}
	return intReply(added)
}

func (r *run) zscore(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeZSet)
	if wrong {
		return wrongType
	}
	if e != nil {
		if s, ok := e.zscore(args[2]); ok {
			return bulkReply(formatScore(s))
		}
	}
	return nilReply
}

func (r *run) zrem(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeZSet)
	if wrong {
		return wrongType
	}
	n := int64(0)
	if e != nil {
		for _, m := range args[2:] {
			if e.zrem(m) {
				n++
			}
		}
		r.dropIfEmpty(args[1], e)
	}
	return intReply(n)
}

func (r *run) zcard(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeZSet)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return intReply(0)
	}
	return intReply(int64(len(e.zset)))
}

// scoreRange parses a ZRANGEBYSCORE bound: a float, "(" for exclusive, ±inf.
func scoreRange(s string) (float64, bool, bool) {
	excl := strings.HasPrefix(s, "(")
	f, ok := parseScore(strings.TrimPrefix(s, "("))
	return f, excl, ok
}

// inRanger returns whether a score lies within the bounds args[2] and
// args[3]; ok is false when a bound is not a float.
func inRanger(args []string) (func(float64) bool, bool) {
	lo, loEx, ok1 := scoreRange(args[2])
	hi, hiEx, ok2 := scoreRange(args[3])
	if !ok1 || !ok2 {
		return nil, false
	}
	return func(s float64) bool {
		return (s > lo || (!loEx && s == lo)) && (s < hi || (!hiEx && s == hi))
	}, true
}

// zcount is ZCOUNT and ZREMRANGEBYSCORE.
func (r *run) zcount(args []string) Reply {
	in, ok := inRanger(args)
	if !ok {
		return errReply("ERR min or max is not a float")
	}
	e, wrong := r.lookupType(args[1], typeZSet)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return intReply(0)
	}
	remove := lowerASCII(args[0]) == "zremrangebyscore"
	n, kept := int64(0), e.zset[:0:0]
	for _, m := range e.zset {
		if in(m.s) {
			n++
			if remove {
				continue
			}
		}
		kept = append(kept, m)
	}
	if remove {
		e.zset = kept
		r.dropIfEmpty(args[1], e)
	}
	return intReply(n)
}

// zrange is ZRANGE and ZREVRANGE by index, with WITHSCORES.
func (r *run) zrange(args []string) Reply {
	withScores := false
	for _, o := range args[4:] {
		if upperASCII(o) != "WITHSCORES" {
			return r.fail(ClassCommand, args, o, "ZRANGE options other than WITHSCORES are not in the analyzer's model")
		}
		withScores = true
	}
	start, ok1 := parseInt(args[2])
	stop, ok2 := parseInt(args[3])
	if !ok1 || !ok2 {
		return notInteger
	}
	e, wrong := r.lookupType(args[1], typeZSet)
	if wrong {
		return wrongType
	}
	out := Reply{Type: ArrayReply}
	if e == nil {
		return out
	}
	n := int64(len(e.zset))
	if start < 0 {
		start = max(n+start, 0)
	}
	if stop < 0 {
		stop = n + stop
	}
	stop = min(stop, n-1)
	rev := lowerASCII(args[0]) == "zrevrange"
	for i := start; i <= stop; i++ {
		m := e.zset[i]
		if rev {
			m = e.zset[n-1-i]
		}
		out.Elems = append(out.Elems, bulkReply(m.m))
		if withScores {
			out.Elems = append(out.Elems, bulkReply(formatScore(m.s)))
		}
	}
	return out
}

func (r *run) push(args []string) Reply {
	e, wrong := r.create(args[1], typeList)
	if wrong {
		return wrongType
	}
	for _, v := range args[2:] {
		if lowerASCII(args[0]) == "lpush" {
			e.list = append([]string{v}, e.list...)
		} else {
			e.list = append(e.list, v)
		}
	}
	return intReply(int64(len(e.list)))
}

func (r *run) llen(args []string) Reply {
	e, wrong := r.lookupType(args[1], typeList)
	switch {
	case wrong:
		return wrongType
	case e == nil:
		return intReply(0)
	}
	return intReply(int64(len(e.list)))
}
