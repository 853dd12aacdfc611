package quorum

import (
	"bytes"
	"math"
	"sort"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// How the masters' replies combine into the client's reply, per Agg. All
// run with r.mu held.

func (r *Request) mostCommonNo() resp.Reply {
	if r.pttlAt > 0 {
		return r.longestPTTLNo()
	}
	// Fast path: every non-yes reply is nil (a contended SET NX).
	nils, others := 0, 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesAt(i) {
			continue
		}
		if r.replyAt(i).Type == resp.Nil {
			nils++
		} else {
			others++
		}
	}
	if others == 0 && nils > 0 {
		return resp.ReplyNil
	}
	best, bestN := r.noReply(), 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesAt(i) {
			continue
		}
		c := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && r.replyAt(j).Equal(r.replyAt(i)) {
				c++
			}
		}
		if c > bestN {
			best, bestN = r.replyAt(i), c
		}
	}
	return best
}

// majorityValue finds the value most masters hold (non-nil) and how many.
func (r *Request) majorityValue() (resp.Reply, int) {
	var best resp.Reply
	bestN := 0
	for i := 0; i < r.e.n; i++ {
		v, ok := r.valueOf(i)
		if !ok {
			continue
		}
		c := 0
		for j := i; j < r.e.n; j++ {
			if w, ok := r.valueOf(j); ok && bytes.Equal(w.Str, v.Str) {
				c++
			}
		}
		if c > bestN {
			best, bestN = v, c
		}
	}
	return best, bestN
}

// valueOf is master i's value: the bulk reply of GET, or the first element
// of a [value, pttl] pair.
func (r *Request) valueOf(i int) (resp.Reply, bool) {
	if r.state[i] != replied {
		return resp.Reply{}, false
	}
	v := r.replyAt(i)
	if r.agg == AggValueTTL || r.agg == AggValue || r.agg == AggValuePTTL {
		if v.Type != resp.Array || len(v.Elems) != 2 {
			return resp.Reply{}, false
		}
		v = v.Elems[0]
	}
	return v, v.Type == resp.Bulk
}

func (r *Request) readSuccess(v resp.Reply) {
	if r.agg == AggValue {
		r.reply = v
		return
	}
	ttl := r.qthTTL(func(rep resp.Reply) (int64, bool) {
		if rep.Type != resp.Array || len(rep.Elems) != 2 || !rep.Elems[0].Equal(v) || rep.Elems[1].Type != resp.Integer {
			return 0, false
		}
		return rep.Elems[1].Int, true
	})
	r.reply = resp.Reply{Type: resp.Integer, Int: ttl}
	if r.agg == AggValuePTTL {
		r.reply = resp.Reply{Type: resp.Array, Elems: []resp.Reply{v, r.reply}}
	}
}

func (r *Request) readFailure() {
	if int(r.answered) < r.e.q {
		r.err = r.noQuorum()
		return
	}
	// A master that answered an error says nothing of the key: with it a
	// quorum may hold the key, so nil ("not held") would be a guess. The
	// client gets the error, which says what failed (WRONGTYPE, as one
	// Redis; a permission error where lockproxy's user lacks a command).
	if errs := r.errorReplies(); errs > 0 && int(r.answered-errs) < r.e.q {
		r.reply, _ = r.commonError()
		return
	}
	switch r.agg {
	case AggValue:
		r.reply = resp.ReplyNil
	case AggValuePTTL:
		r.reply = resp.Reply{Type: resp.Array, Elems: []resp.Reply{resp.ReplyNil, {Type: resp.Integer, Int: -2}}}
	default:
		r.reply = resp.Reply{Type: resp.Integer, Int: -2}
	}
}

// qthTTL is the Q-th largest TTL (ms) among the replies get accepts, minus
// the drift of that TTL and the time since the command was parsed, floored
// at 0; -1 (no expiry) when the Q-th value is -1. Each reading was taken at
// some moment after t0 and has aged since: a master that answered at once
// while a slower one kept the decision waiting holds its copy for that much
// less than it said. Ageing every reading from t0 is what each of the Q
// holders surely still has; without it the answer could outlast the quorum
// by up to node_timeout, and a client that trusts it would hold past the
// moment another can be granted the lock.
func (r *Request) qthTTL(get func(resp.Reply) (int64, bool)) int64 {
	var ttls [MaxMasters]int64
	k := 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied {
			continue
		}
		if v, ok := get(r.replyAt(i)); ok {
			ttls[k] = v
			k++
		}
	}
	s := ttls[:k]
	// A copy without expiry (-1) outlasts every other: it sorts first.
	longer := func(x int64) int64 {
		if x == -1 {
			return math.MaxInt64
		}
		return x
	}
	sort.Slice(s, func(a, b int) bool { return longer(s[a]) > longer(s[b]) })
	if k < r.e.q {
		return -2
	}
	v := s[r.e.q-1]
	if v < 0 {
		return v
	}
	v -= Drift(time.Duration(v)*time.Millisecond, r.e.cfg.DriftFactor).Milliseconds()
	if age := batching.Now() - r.t0; age > 0 {
		v -= (age + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	}
	if v < 0 {
		v = 0
	}
	return v
}

// keysOutcome counts the keys a quorum reported 1 for.
func (r *Request) keysOutcome() {
	if int(r.answered) < r.e.q {
		r.err = r.noQuorum()
		return
	}
	var count int64
	for k := 0; k < r.nkeys; k++ {
		c := 0
		for i := 0; i < r.e.n; i++ {
			rep := r.replyAt(i)
			if r.state[i] == replied && rep.Type == resp.Array && k < len(rep.Elems) && rep.Elems[k].Type == resp.Integer && rep.Elems[k].Int > 0 {
				c++
			}
		}
		if c >= r.e.q {
			count++
		}
	}
	r.reply = resp.Reply{Type: resp.Integer, Int: count}
}

// longestPTTLNo is, among the no replies that carry the holder's PTTL (at
// pttlAt), the one with the longest: how long the client should wait
// before trying again. When none does and a quorum of masters answered the
// same error, that error: it is the script's answer in the lock's state
// (Redisson's RedissonNonReentrantLock answers its holder's re-entry with
// an error reply, which the library turns into IllegalMonitorStateException),
// as one Redis would have given it; a made-up PTTL there had the holder
// wait for its own lock, and try again, for as long as it held it.
// lostReply otherwise.
func (r *Request) longestPTTLNo() resp.Reply {
	best, bestTTL := r.lostReply(), int64(-1)
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesAt(i) {
			continue
		}
		rep := r.replyAt(i)
		v := rep
		if at := int(r.pttlAt) - 1; at > 0 {
			if rep.Type != resp.Array || len(rep.Elems) < at {
				continue
			}
			v = rep.Elems[at-1]
		}
		if v.Type == resp.Integer && v.Int > bestTTL {
			best, bestTTL = rep, v.Int
		}
	}
	if bestTTL < 0 {
		if rep, n := r.commonError(); n >= r.e.q {
			return rep
		}
	}
	return best
}

// lostReply is the operation's own "not done" reply, for a lost vote that
// no master's reply describes. Where that reply carries the holder's PTTL
// (pttlAt), it carries node_timeout there instead of the analyzer's
// placeholder: every master that answered said yes, but the vote was lost
// all the same (a re-entry whose counts could not be shown to hold the
// holder's depth, no validity left). Redisson-style clients wait that long
// before they try again; with the placeholder, 0, they tried again at once,
// in a loop, for as long as the cause lasted.
func (r *Request) lostReply() resp.Reply {
	rep := r.noReply()
	at := int(r.pttlAt) - 1
	if at < 0 {
		return rep
	}
	wait := max(r.e.cfg.NodeTimeout.Milliseconds(), 1)
	switch {
	case at == 0 && rep.Type == resp.Integer && rep.Int < wait:
		rep.Int = wait
	case at > 0 && rep.Type == resp.Array && len(rep.Elems) >= at && rep.Elems[at-1].Type == resp.Integer && rep.Elems[at-1].Int < wait:
		elems := append([]resp.Reply(nil), rep.Elems...)
		elems[at-1] = resp.Reply{Type: resp.Integer, Int: wait}
		rep.Elems = elems
	default:
		return rep
	}
	if r.rule != nil && r.rule.LooksLikeYes(&rep) {
		return r.noReply() // never a "not done" the client could read as done
	}
	return rep
}
