package quorum

import "github.com/lockproxy/lockproxy/internal/resp"

// Pops from signal lists, for BLPOP and BRPOP. A signal list (the one
// python-redis-lock's release fills) is written by a lock script that runs
// on every master, so each master holds its copy of the signal; one round
// pops from every master, and the waiter wakes when any of them had one. A
// signal is a hint to retry the lock, never a grant: a wake-up for a
// signal only a minority held costs the waiter one refused attempt, which
// is better than sleeping through a release because a master was slow.

// Pop is one non-blocking round of BLPOP (right false) or BRPOP over keys:
// every master pops the first element of the first non-empty list.
func (e *Engine) Pop(keys [][]byte, right bool, t0 int64) *Request {
	side := []byte("l")
	if right {
		side = []byte("r")
	}
	return keyed(&Request{kind: Read, agg: AggPop, nkeys: len(keys), t0: t0,
		cmd: AppendEvalSHA(nil, popScript.SHA1, keys, [][]byte{side})}, keys)
}

// decidePop decides a Pop once a quorum answered and one of them popped
// an element, or once every master answered (or the deadline): the element
// most masters gave, else a quorum's error, else nil (every list empty).
// r.mu is held.
func (r *Request) decidePop(q, outstanding int32, force bool) bool {
	best, bestN := -1, 0
	errs := 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied {
			continue
		}
		rep := &r.replies[i]
		if rep.Type == resp.Error {
			errs++
			continue
		}
		if rep.Type != resp.Array || len(rep.Elems) != 2 {
			continue
		}
		n := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && r.replies[j].Equal(*rep) {
				n++
			}
		}
		if n > bestN {
			best, bestN = i, n
		}
	}
	if !force && outstanding > 0 && (best < 0 || r.answered < q) {
		return false
	}
	r.won = true
	switch {
	case best >= 0:
		r.reply = r.replies[best]
	case r.answered < q:
		r.won = false
		r.err = r.noQuorum()
	case int32(errs) >= q:
		for i := 0; i < r.e.n; i++ {
			if r.state[i] == replied && r.replies[i].Type == resp.Error {
				r.reply = r.replies[i]
				break
			}
		}
	default:
		r.reply = resp.ReplyNil
	}
	return true
}
