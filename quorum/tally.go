package quorum

import (
	"bytes"
	"sort"
	"time"

	"github.com/lockproxy/lockproxy/batching"
)

// How the masters' replies combine into the client's reply, per Agg. All
// run with r.mu held.

func (r *Request) mostCommonNo() batching.Reply {
	if r.pttlAt > 0 {
		return r.longestPTTLNo()
	}
	// Fast path: every non-yes reply is nil (a contended SET NX).
	nils, others := 0, 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesFrom[i] {
			continue
		}
		if r.replies[i].Type == batching.Nil {
			nils++
		} else {
			others++
		}
	}
	if others == 0 && nils > 0 {
		return batching.ReplyNil
	}
	best, bestN := r.noReply, 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesFrom[i] {
			continue
		}
		c := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && r.replies[j].Equal(r.replies[i]) {
				c++
			}
		}
		if c > bestN {
			best, bestN = r.replies[i], c
		}
	}
	return best
}

// majorityValue finds the value most masters hold (non-nil) and how many.
func (r *Request) majorityValue() (batching.Reply, int) {
	var best batching.Reply
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
func (r *Request) valueOf(i int) (batching.Reply, bool) {
	if r.state[i] != replied {
		return batching.Reply{}, false
	}
	v := r.replies[i]
	if r.agg == AggValueTTL || r.agg == AggValue {
		if v.Type != batching.Array || len(v.Elems) != 2 {
			return batching.Reply{}, false
		}
		v = v.Elems[0]
	}
	return v, v.Type == batching.Bulk
}

func (r *Request) readSuccess(v batching.Reply) {
	if r.agg == AggValue {
		r.reply = v
		return
	}
	ttl := r.qthTTL(func(rep batching.Reply) (int64, bool) {
		if rep.Type != batching.Array || len(rep.Elems) != 2 || !rep.Elems[0].Equal(v) || rep.Elems[1].Type != batching.Integer {
			return 0, false
		}
		return rep.Elems[1].Int, true
	})
	r.reply = batching.Reply{Type: batching.Integer, Int: ttl}
}

func (r *Request) readFailure() {
	if int(r.answered) < r.e.q {
		r.err = r.noQuorum()
		return
	}
	if r.agg == AggValue {
		r.reply = batching.ReplyNil
	} else {
		r.reply = batching.Reply{Type: batching.Integer, Int: -2}
	}
}

// qthTTL is the Q-th largest TTL (ms) among the replies get accepts, minus
// the drift of that TTL, floored at 0; -1 (no expiry) when the Q-th value
// is -1.
func (r *Request) qthTTL(get func(batching.Reply) (int64, bool)) int64 {
	var ttls [MaxMasters]int64
	k := 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied {
			continue
		}
		if v, ok := get(r.replies[i]); ok {
			ttls[k] = v
			k++
		}
	}
	s := ttls[:k]
	sort.Slice(s, func(a, b int) bool { return s[a] > s[b] })
	if k < r.e.q {
		return -2
	}
	v := s[r.e.q-1]
	if v < 0 {
		return v
	}
	v -= Drift(time.Duration(v)*time.Millisecond, r.e.cfg.DriftFactor).Milliseconds()
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
			rep := r.replies[i]
			if r.state[i] == replied && rep.Type == batching.Array && k < len(rep.Elems) && rep.Elems[k].Type == batching.Integer && rep.Elems[k].Int > 0 {
				c++
			}
		}
		if c >= r.e.q {
			count++
		}
	}
	r.reply = batching.Reply{Type: batching.Integer, Int: count}
}

// longestPTTLNo is, among the no replies that carry the holder's PTTL (at
// pttlAt), the one with the longest: how long the client should wait
// before trying again. The configured no reply when none does.
func (r *Request) longestPTTLNo() batching.Reply {
	best, bestTTL := r.noReply, int64(-1)
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesFrom[i] {
			continue
		}
		rep := r.replies[i]
		v := rep
		if at := r.pttlAt - 1; at > 0 {
			if rep.Type != batching.Array || len(rep.Elems) < at {
				continue
			}
			v = rep.Elems[at-1]
		}
		if v.Type == batching.Integer && v.Int > bestTTL {
			best, bestTTL = rep, v.Int
		}
	}
	return best
}
