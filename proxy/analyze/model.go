package analyze

import (
	"math"
	"sort"
	"strconv"
)

// keyType is the Redis type of a key's value.
type keyType uint8

const (
	typeString keyType = iota + 1
	typeHash
	typeZSet
	typeList
)

func (t keyType) String() string {
	switch t {
	case typeString:
		return "string"
	case typeHash:
		return "hash"
	case typeZSet:
		return "zset"
	case typeList:
		return "list"
	}
	return "none"
}

// entry is one key's value and expiry.
type entry struct {
	typ  keyType
	str  string
	hash []field  // insertion order, as a small Redis hash (listpack) keeps it
	zset []member // sorted by score, then member, as Redis orders them
	list []string
	exp  int64 // absolute unix ms; 0 = no expiry
}

type field struct{ f, v string }

type member struct {
	m string
	s float64
}

func (e *entry) clone() *entry {
	c := *e
	c.hash = append([]field(nil), e.hash...)
	c.zset = append([]member(nil), e.zset...)
	c.list = append([]string(nil), e.list...)
	return &c
}

func (e *entry) hget(f string) (string, bool) {
	for _, x := range e.hash {
		if x.f == f {
			return x.v, true
		}
	}
	return "", false
}

// hset sets field f and reports whether it is new.
func (e *entry) hset(f, v string) bool {
	for i := range e.hash {
		if e.hash[i].f == f {
			e.hash[i].v = v
			return false
		}
	}
	e.hash = append(e.hash, field{f, v})
	return true
}

func (e *entry) hdel(f string) bool {
	for i := range e.hash {
		if e.hash[i].f == f {
			e.hash = append(e.hash[:i], e.hash[i+1:]...)
			return true
		}
	}
	return false
}

func (e *entry) zscore(m string) (float64, bool) {
	for _, x := range e.zset {
		if x.m == m {
			return x.s, true
		}
	}
	return 0, false
}

// zadd sets m's score and reports whether m is new.
func (e *entry) zadd(m string, s float64) bool {
	isNew := !e.zrem(m)
	e.zset = append(e.zset, member{m, s})
	sort.SliceStable(e.zset, func(i, j int) bool {
		a, b := e.zset[i], e.zset[j]
		return a.s < b.s || (a.s == b.s && a.m < b.m)
	})
	return isNew
}

func (e *entry) zrem(m string) bool {
	for i := range e.zset {
		if e.zset[i].m == m {
			e.zset = append(e.zset[:i], e.zset[i+1:]...)
			return true
		}
	}
	return false
}

// empty reports whether an aggregate has lost its last element, when Redis
// deletes the key.
func (e *entry) empty() bool {
	switch e.typ {
	case typeHash:
		return len(e.hash) == 0
	case typeZSet:
		return len(e.zset) == 0
	case typeList:
		return len(e.list) == 0
	}
	return false
}

// keyspace is database 0 of one modelled master.
type keyspace map[string]*entry

func (ks keyspace) clone() keyspace {
	c := make(keyspace, len(ks))
	for k, e := range ks {
		c[k] = e.clone()
	}
	return c
}

// names returns the keys in sorted order, so that everything derived from a
// keyspace is deterministic.
func (ks keyspace) names() []string {
	out := make([]string, 0, len(ks))
	for k := range ks {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// formatScore renders a sorted-set score as Redis replies it ("%.17g", inf).
func formatScore(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "inf"
	case math.IsInf(s, -1):
		return "-inf"
	}
	if r, ok := redisArgFloat(s); ok {
		return r
	}
	return strconv.FormatFloat(s, 'g', 17, 64)
}

func redisArgFloat(s float64) (string, bool) {
	if s == float64(int64(s)) && s < 1e17 && s > -1e17 {
		return strconv.FormatInt(int64(s), 10), true
	}
	return "", false
}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }
