package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// A request's decision: the quorum rules over the masters' replies (early
// decision, validity, the yes reply the client hears, NOQUORUM and its
// reasons). Called with r.mu held.

// tryDecide computes the outcome if it is certain; force decides with what
// has arrived. r.mu is held. It returns true when it decided now and the
// outcome is to be published (not when a split vote is retried instead).
func (r *Request) tryDecide(force bool) bool {
	n, q := int32(r.e.n), int32(r.e.q)
	outstanding := n - r.answered - r.failed
	if outstanding == 0 {
		force = true
	}
	switch r.agg {
	case AggVote:
		if !r.decideVote(n, q, outstanding, force) {
			return false
		}
	case AggValue, AggValueTTL, AggValuePTTL:
		if v, holders := r.majorityValue(); holders >= int(q) {
			r.readSuccess(v)
		} else if r.agg == AggValue && r.hashRead == 0 && r.answered >= q && r.counterGet(q, force) {
			// a counter (counter.go)
		} else if force && r.hashRead == hashGet && r.answered >= q && r.hashCount(q) {
			// counts that differ between masters (hashread.go)
		} else if force {
			r.readFailure()
		} else {
			return false
		}
	case AggKeys:
		if !force {
			return false
		}
		r.keysOutcome()
	case AggEach:
		if !force {
			return false
		}
		r.eachOutcome()
	case AggCounter:
		if !r.decideCounter(q, outstanding, force) {
			return false
		}
	case AggPop:
		if !r.decidePop(q, outstanding, force) {
			return false
		}
	}
	r.decidedIn = true
	if r.inDispatch || r.retrying {
		// dispatch is still submitting on another goroutine (or this
		// one): it finishes the decision when it returns. A retry
		// publishes its own outcome.
		return false
	}
	return true
}

// decideVote decides an AggVote request if its outcome is certain, and
// reports whether it did.
func (r *Request) decideVote(n, q, outstanding int32, force bool) bool {
	no := r.answered - r.yes
	switch {
	case r.yes >= q && !force && outstanding > 0 && r.kind == Release && !r.yesAgree(q):
		// Releases whose yes replies differ (a re-entrant release: 1
		// where it deleted, 0 where a count is left) wait for the rest,
		// so that the client hears what a quorum did; rare (a leftover
		// count on a master), and bounded by node_timeout.
		return false
	case r.yes >= q && r.rule == &YesSameValue && !r.yesAgree(q):
		// Yes votes for different values (a tokenless PEXPIRE that found
		// another client's copy on some master): not a quorum of one
		// lock. Wait for the others; short of Q equal ones it is lost.
		if !force && outstanding > 0 {
			return false
		}
		r.failure()
	case r.yes >= q && (r.reent == nil || r.reentrantYes() >= q):
		// A re-entrant acquisition counts only the yes votes that keep
		// a quorum's counts at the holder's depth (reentrant.go); short
		// of that it waits for the other masters, then raises the counts.
		r.success()
		if r.won && r.fence() == nil {
			// Granted for good (a fenced grant keeps the longer TTL):
			// the shorter TTL asked, before the key passes on, so it
			// reaches every master first (shorten.go).
			r.sendShorten()
			r.levelUp() // counts below the grant's level (levelup.go)
		}
	case r.yes >= q && r.reent != nil && (force || outstanding == 0) && r.raiseCounts():
	case r.kind == Release && no-r.errorReplies() <= n-q:
		// Not refused by enough masters to prove the token is not held
		// on a quorum: the masters that did not answer may hold it, and
		// so may those that answered an error (the script did not run
		// there: NOREPLICAS, say). Wait for them; then the release
		// stands if those can no longer be a quorum
		// (releaseUnconfirmed). Counted as "not held", an error let a
		// holder hear "released" while a quorum still held its lock
		// (found by review).
		switch {
		case !force:
			return false
		case r.answered < q:
			r.failure()
		case n-r.yes-(no-r.errorReplies()) < q:
			r.releaseUnconfirmed()
		default:
			r.releaseUnknown()
		}
	case r.yes+outstanding < q && (force || r.answered >= q || r.answered+outstanding < q):
		// The vote is lost; answered decides between "not acquired"
		// and NOQUORUM, so wait for it while it can still matter.
		r.failure()
	case force:
		r.failure()
	default:
		return false
	}
	return true
}

// success: a quorum voted yes.
func (r *Request) success() {
	if r.TTL > 0 {
		r.validity = Validity(r.TTL, time.Duration(batching.Now()-r.t0), r.e.cfg.DriftFactor)
		if r.validity <= 0 {
			r.reply = r.lostReply()
			r.undo()
			return
		}
	}
	r.won = true
	r.reply = r.releaseYes(r.commonYes())
	if r.combine == CombineQthTTL {
		r.reply = resp.Reply{Type: resp.Integer, Int: r.qthTTL(func(rep resp.Reply) (int64, bool) {
			return rep.Int, r.rule.IsYes(&rep, r.nkeys)
		})}
	}
	if r.fence() != nil {
		r.chain(contFence) // the client gets its fencing token instead (counter.go)
	}
}

// yesAgree reports whether q masters gave the same yes reply. r.mu is
// held.
func (r *Request) yesAgree(q int32) bool {
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || !r.yesAt(i) {
			continue
		}
		n := int32(0)
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && r.yesAt(j) && r.replyAt(j).Equal(r.replyAt(i)) {
				n++
			}
		}
		if n >= q {
			return true
		}
	}
	return false
}

// commonYes is the yes reply most masters gave, the first by master order
// among equals. Yes replies may differ (a re-entrant release answers 1 where
// it deleted the lock, 0 where a count is left): the client gets what a
// quorum says, not what one master that may hold a leftover says.
// r.mu is held.
func (r *Request) commonYes() resp.Reply {
	best, bestN := -1, 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || !r.yesAt(i) {
			continue
		}
		n := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && r.yesAt(j) && r.replyAt(j).Equal(r.replyAt(i)) {
				n++
			}
		}
		if 2*n > r.e.n {
			return r.replyAt(i) // a majority: no other reply can match it
		}
		if n > bestN {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return r.reply
	}
	return r.replyAt(best)
}

// releaseYes is the yes reply a release's client hears instead of rep.
// A release whose yes reply where it deleted the lock differs from the
// one where a count is left (deletedYes: a re-entrant release, Redisson's
// unlock answering 1 and 0; or a script that answers the deleting reply
// where there is no lock, analyze's AbsentIsYes) says "released" only
// when the masters that may still hold the token (all but those that
// answered the deleting reply and those that answered "not yours") are
// fewer than a quorum. Otherwise the client hears the most common other
// yes reply (the holder's count left). By count alone, a tie between the
// masters that deleted their copy (one level short: a re-entry or a
// restart they missed) or lack the lock, and those that answered a count
// left, with another holder unanswered (a master cut off), let a holder
// at depth 2 hear "released" while a quorum still held its lock (found by
// review, first for the absent reply). When every master agrees the
// reply is the same as by count. r.mu is held.
func (r *Request) releaseYes(rep resp.Reply) resp.Reply {
	if r.deletedYes == 0 || r.kind != Release {
		return rep
	}
	deleted := commonReply(r.deletedYes)
	if !rep.Equal(deleted) {
		return rep
	}
	gone := 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied {
			continue
		}
		if at := r.replyAt(i); r.yesAt(i) && at.Equal(deleted) || !r.yesAt(i) && at.Type != resp.Error {
			gone++
		}
	}
	if r.e.n-gone < r.e.q {
		return rep
	}
	best, bestN := -1, 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || !r.yesAt(i) || r.replyAt(i).Equal(deleted) {
			continue
		}
		n := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && r.yesAt(j) && r.replyAt(j).Equal(r.replyAt(i)) {
				n++
			}
		}
		if n > bestN {
			best, bestN = i, n
		}
	}
	if best < 0 {
		// Every yes said it: a quorum of them (success) leaves fewer than
		// a quorum of others; an unconfirmed release has proved that
		// those that did not answer are fewer than a quorum.
		return rep
	}
	return r.replyAt(best)
}

// failure: the vote is lost. Fewer than a quorum answering is NOQUORUM;
// otherwise the most common non-yes reply (nil for SET NX). A lost
// acquisition that some masters granted may be a split vote (retry.go).
func (r *Request) failure() {
	if int(r.answered) < r.e.q {
		r.err = r.noQuorum()
	} else {
		r.reply = r.mostCommonNo()
		if r.rule.LooksLikeYes(&r.reply) {
			// A lost vote never answers a master's reply that the library
			// could read as success (a bulk "OK" where the yes is +OK):
			// the script's own "not done" reply instead.
			r.reply = r.lostReply()
		}
		// With some yes votes the key may be free: the vote split
		// between concurrent attempts (other proxies'), each undone.
		r.contended = r.yes == 0
	}
	r.undo()
	if r.err == nil && r.yes > 0 {
		r.retrying = r.e.mayRetry(r)
	}
}

// releaseUnconfirmed: a quorum answered a release, too few of them said
// yes to confirm it and too few said no to prove the caller held nothing.
// The token is gone from every master that said yes; the others that
// answered did not hold it; so it can be left only on masters that did not
// answer, which are fewer than a quorum. The lock is released in effect, and
// the holder is told so with the yes reply (a "not the owner" reply would
// be false for a valid holder whose lock sits on the unanswered masters).
func (r *Request) releaseUnconfirmed() {
	r.won = true
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == replied && r.yesAt(i) {
			r.reply = r.releaseYes(r.replyAt(i))
			return
		}
	}
	r.reply = r.mostCommonNo() // unreachable: a quorum answered and at most n-q said no
}

// errorReplies counts the masters whose reply counts as an answer but is
// an error. r.mu is held.
func (r *Request) errorReplies() int32 {
	n := int32(0)
	for i := 0; i < r.e.n; i++ {
		if r.state[i] == replied && !r.yesAt(i) && r.replyAt(i).Type == resp.Error {
			n++
		}
	}
	return n
}

// releaseUnknown: a quorum answered a release, but with the masters that
// answered an error the token may still be on a quorum. The client gets
// the most common error, which says what failed; the holder must not take
// its lock for released (it expires by its TTL). r.mu is held.
func (r *Request) releaseUnknown() {
	r.reply, _ = r.commonError()
}

// commonError is the error reply most masters gave, and how many gave it
// (0 when none answered an error). r.mu is held.
func (r *Request) commonError() (resp.Reply, int) {
	best, bestN := resp.Reply{}, 0
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || r.yesAt(i) || r.replyAt(i).Type != resp.Error {
			continue
		}
		c := 0
		for j := i; j < r.e.n; j++ {
			if r.state[j] == replied && !r.yesAt(j) && r.replyAt(j).Equal(r.replyAt(i)) {
				c++
			}
		}
		if c > bestN {
			best, bestN = r.replyAt(i), c
		}
	}
	return best, bestN
}

func (r *Request) noQuorum() *NoQuorumError {
	// Masters still outstanding when the lack of quorum became certain
	// count as answering: the number says how many masters are reachable.
	e := &NoQuorumError{Answered: r.e.n - int(r.failed), N: r.e.n, Q: r.e.q}
	for i := 0; i < r.e.n; i++ {
		if err := r.errAt(i); err != nil {
			e.Masters = append(e.Masters, MasterFailure{Addr: r.e.cfg.Masters[i], Err: unwrapMaster(err)})
		}
	}
	return e
}

// eachOutcome decides an AggEach request (a client's PUBLISH, a repush):
// done when at least one master answered an integer, so that its command
// ran somewhere. Otherwise nothing is known to have run — a PUBLISH that
// expired before any master got it reaches no subscriber, though this
// proxy's subscribers would have been counted as receivers — so the
// outcome is the error the masters answered (one Redis would answer it
// too: an ACL's NOPERM, say), or NOQUORUM naming why each failed.
func (r *Request) eachOutcome() {
	var errRep resp.Reply
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied {
			continue
		}
		switch rep := r.replyAt(i); rep.Type {
		case resp.Integer:
			r.won = true
			return
		case resp.Error:
			if errRep.Type == 0 {
				errRep = rep
			}
		}
	}
	if errRep.Type != 0 {
		r.reply = errRep
		return
	}
	r.err = r.noQuorum()
}
