package quorum

import (
	"strconv"

	"github.com/lockproxy/lockproxy/internal/resp"
)

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
		rep := r.replyAt(i)
		if rep.Type == resp.Error {
			errs++
			continue
		}
		if !isPopped(rep) {
			continue
		}
		n := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && samePop(r.replyAt(j), rep) {
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
		// {key, element}, as BLPOP answers; the PTTL stays in replies.
		r.reply = resp.Reply{Type: resp.Array, Elems: r.replyAt(best).Elems[:2]}
	case r.answered < q:
		r.won = false
		r.err = r.noQuorum()
	case int32(errs) >= q:
		for i := 0; i < r.e.n; i++ {
			if r.state[i] == replied && r.replyAt(i).Type == resp.Error {
				r.reply = r.replyAt(i)
				break
			}
		}
	default:
		r.reply = resp.ReplyNil
	}
	return true
}

// isPopped reports whether a master's pop round reply carries an element:
// {key, element, pttl, left}.
func isPopped(rep resp.Reply) bool {
	return rep.Type == resp.Array && len(rep.Elems) == 4
}

// samePop compares two masters' popped elements, not their lists' PTTLs.
func samePop(a, b resp.Reply) bool {
	return isPopped(a) && isPopped(b) && a.Elems[0].Equal(b.Elems[0]) && a.Elems[1].Equal(b.Elems[1])
}

// PoppedTTL is the longest PTTL, before the pop, of the list a decided Pop
// answered an element of, among the masters that popped that element; -1
// when none had an expiry. For Repush.
func (r *Request) PoppedTTL() int64 {
	ttl := int64(-1)
	if r.e == nil || r.reply.Type != resp.Array || len(r.reply.Elems) != 2 {
		return -1 // not sent (quorum.Decided), or nothing popped
	}
	// Masters still answering write their replies under r.mu (review,
	// helper-51: a data race with a late reply).
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < r.e.n; i++ {
		rep := r.replyAt(i)
		if r.state[i] == replied && isPopped(rep) && rep.Elems[0].Equal(r.reply.Elems[0]) &&
			rep.Elems[1].Equal(r.reply.Elems[1]) && rep.Elems[2].Type == resp.Integer {
			ttl = max(ttl, rep.Elems[2].Int)
		}
	}
	return ttl
}

// PoppedMore reports whether a master that answered a decided Pop with an
// element of the answered list still holds more of that list after its
// pop. A script that pushes several elements at once pushes them on each
// master together, so a master that popped the first has the others:
// false means the elements of the push that woke the round are all taken
// where the round looked. A copy that a master slower than the round
// gets later is not an element more but the same one, already answered
// (helper-71: waking another waiter to look for more made it pop that
// copy, and one push served two BLPOP clients where Redis serves one).
func (r *Request) PoppedMore() bool {
	if r.e == nil || r.reply.Type != resp.Array || len(r.reply.Elems) != 2 {
		return false // not sent (quorum.Decided), or nothing popped
	}
	r.mu.Lock() // late replies are written under it (PoppedTTL)
	defer r.mu.Unlock()
	for i := 0; i < r.e.n; i++ {
		rep := r.replyAt(i)
		if r.state[i] == replied && isPopped(rep) && rep.Elems[0].Equal(r.reply.Elems[0]) &&
			rep.Elems[3].Type == resp.Integer && rep.Elems[3].Int > 0 {
			return true
		}
	}
	return false
}

// Repush puts back, on every master, an element a Pop took for a client
// that no longer waits (it hung up or the proxy is shutting down during
// the round), at the end it was popped from, with the list's PTTL (ttl
// milliseconds; -1: none) if the push creates the list again. On
// Redis that client would have popped nothing. A master that had not
// popped it gets one signal more: a hint to retry a lock, which costs a
// waiter one refused attempt, where a lost signal could cost it its whole
// wait. Every master's reply is kept (Replies), with no vote.
func (e *Engine) Repush(key, elem []byte, right bool, ttl int64, t0 int64) *Request {
	side := []byte("l")
	if right {
		side = []byte("r")
	}
	return keyed(&Request{kind: Read, agg: AggEach, nkeys: 1, t0: t0,
		cmd: AppendEvalSHA(nil, repushScript.SHA1, [][]byte{key}, [][]byte{elem, side, strconv.AppendInt(nil, ttl, 10)})}, [][]byte{key})
}
