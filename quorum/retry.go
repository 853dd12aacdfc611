package quorum

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/lockproxy/lockproxy/batching"
)

// Split votes. Several lockproxy processes in front of one master set each
// send their SET NX to every master; masters see them in different orders,
// so a vote can split (2, 2 and 1 yes of 5) and every attempt loses, each
// undone: the key was free, yet every client is refused. An acquisition
// that lost although some masters granted it is therefore tried once more:
// its undo is already queued on those masters, and the second attempt
// travels the same ordered connections behind it, after a random delay
// (Config.SplitRetryJitter) so that the competing attempts' undos land
// first and competing retries rarely meet again. The retry is a new
// attempt with the same command, token and start time T0, so its validity
// is accounted from the client's original request, and it is undone like
// any attempt if it fails. It runs only while a full second round still
// leaves validity.
//
// A lock held on only some masters (acquired while others were down) also
// gives its contenders a few yes votes: they are retried once too, which
// costs a round trip and nothing else.

// mayRetry reports whether r, a lost acquisition with some yes votes, gets
// a second attempt. r.mu is held.
func (e *Engine) mayRetry(r *Request) bool {
	if r.retried || r.kind != Acquire || r.undoOp == UndoNone || r.TTL <= 0 || e.cfg.SplitRetryJitter < 0 || r.reent != nil {
		return false
	}
	elapsed := time.Duration(batching.Now() - r.t0)
	return Validity(r.TTL, elapsed+e.cfg.SplitRetryJitter+e.cfg.NodeTimeout, e.cfg.DriftFactor) > 0
}

// takeRetry reports, once, that r's retry is to be scheduled: r decided
// to retry and no dispatch of r is still submitting. r.mu is held.
func (r *Request) takeRetry() bool {
	if !r.retrying || r.inDispatch || r.retryGo {
		return false
	}
	r.retryGo = true
	return true
}

// scheduleRetry starts r's second attempt after the jitter. r stays
// undecided for its client meanwhile. The timer holds a reference to r,
// which passes to the child request.
func (e *Engine) scheduleRetry(r *Request) {
	if r.cont != contNone {
		e.continueWith(r) // not a retry: a counter's next step (counter.go)
		return
	}
	e.retries.Add(1)
	r.ref()
	j := e.cfg.SplitRetryJitter
	d := j/10 + rand.N(j-j/10+1)
	time.AfterFunc(d, func() { e.retry(r) })
}

// retry dispatches a child request: the same acquisition, whose outcome
// parent r publishes (adopt). The child aliases r's command and undo
// arguments, and holds r until the child itself is recycled: its late
// replies may still need them for its undo after r was answered.
func (e *Engine) retry(r *Request) {
	c := NewRequest()
	c.kind, c.agg, c.rule, c.combine = r.kind, r.agg, r.rule, r.combine
	c.nkeys, c.cmd, c.undoKeys, c.undoToken = r.nkeys, r.cmd, r.undoKeys, r.undoToken
	c.undoOp, c.token, c.pttlAt = r.undoOp, r.token, r.pttlAt
	c.noIsNoop, c.nilIsNoop = r.noIsNoop, r.nilIsNoop
	c.TTL, c.t0 = r.TTL, r.t0
	c.setNoReply(r.noReply())
	cc := c.coldOf()
	if rc := r.cold; rc != nil {
		cc.keys, cc.undoExtra, cc.load, cc.fence, cc.fenceAt = rc.keys, rc.undoExtra, rc.load, rc.fence, rc.fenceAt
	}
	c.retried, cc.parent, c.e = true, r, e
	if r.chk != nil { // the same script: its replies carry the check too
		c.chk = &checkState{minPTTL: r.chk.minPTTL}
	}
	// Not to masters where r's part is still unknown: r's late undo may
	// still need to go there, and must not follow a write of c's.
	r.mu.Lock()
	for i := 0; i < e.n; i++ {
		if r.state[i] == pending || r.state[i] == timedOut {
			cc.skip |= 1 << i
		}
	}
	r.mu.Unlock()
	c.refs.Store(1) // adopt's
	if e.dispatch(c, batching.Now()) {
		e.adopt(c)
	}
}

// adopt publishes child c's outcome as its parent's: a split vote's retry,
// or a counter's continuation (counter.go). The parent may itself be a
// child, which then passes it on.
func (e *Engine) adopt(c *Request) {
	r := c.parent()
	c.mu.Lock()
	reply, err, validity, contended, won := c.reply, c.err, c.validity, c.contended, c.won
	c.mu.Unlock()
	r.mu.Lock()
	if r.cont != contNone {
		r.adoptCounter(reply, err, won)
		r.cont = contNone
	} else {
		r.reply, r.err, r.validity, r.contended, r.won = reply, err, validity, contended, won
	}
	r.retrying = false
	r.mu.Unlock()
	e.decided(r)
	c.unref()
}

// errSkipped is a retry's vote on a master its parent still waits for.
var errSkipped = errors.New("still answering the first attempt (split vote retried without it)")
