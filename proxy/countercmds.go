package proxy

import (
	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// INCR and INCRBY on counters: the quorum max-register of quorum/counter.go,
// whose value never goes back for callers that follow one another (the
// successive holders of a lock), so it can serve as a fencing token
// (docs/fencing.md). GET on such a key answers the counter's value.

// cmdIncr: INCR key, INCRBY key n with n >= 0.
func cmdIncr(s *Server, c *client, args [][]byte) {
	t0 := evloop.Now()
	by := int64(1)
	if len(args) == 3 {
		n, ok := resp.ParseRedisInt(args[2])
		if !ok {
			c.errorf("ERR value is not an integer or out of range")
			s.cfg.Metrics.Request("incrby", "error")
			return
		}
		if n < 0 {
			c.errorf("%s", errCounterDown)
			s.cfg.Metrics.Request("incrby", "error")
			return
		}
		by = n
	}
	s.submit(c, s.cfg.Engine.Incr(args[1], by, t0), renderReply)
}

// errCounterDown refuses what would make a counter go down.
const errCounterDown = "ERR lockproxy counters only go up: they are fencing tokens, which must never go back; use INCR or INCRBY with an increment >= 0"

// cmdDecr refuses DECR and DECRBY: a counter that goes down is no fencing
// token, and a client that decrements expects a counter lockproxy does
// not keep (a semaphore's count, say).
func cmdDecr(s *Server, c *client, args [][]byte) {
	c.errorf("%s", errCounterDown)
	s.cfg.Metrics.Request("decr", "error")
}
