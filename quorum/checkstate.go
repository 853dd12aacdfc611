package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// checkState is what a checked request's masters reported (WrapCheck).
type checkState struct {
	seen  uint16 // masters whose reply had the checked shape
	had   uint16 // the token was there before
	holds uint16 // the token is there after
	// shortened: masters sent a granted extend's shorter TTL; gen: the
	// key's slot's write count at the grant (shorten.go)
	shortened uint16
	gen       uint64
	pttl      [MaxMasters]int64
	at        [MaxMasters]int64 // PEXPIRETIME after; <= 0: unknown
	minPTTL   int64             // a yes needs at least this PTTL (ms); 0: no minimum
}

// newCheck is the check of a request that accounts validity for ttl
// (0: none); checkTTL says a yes needs a copy whose PTTL outlasts the
// validity: ttl less the drift allowance. For a relative TTL the master
// sets exactly ttl; for an absolute expiry it is ttl less the time since
// the command arrived, and less the master's clock offset ahead of
// lockproxy's, which is what the check catches.
func newCheck(ttl time.Duration, driftFactor float64, checkTTL bool) *checkState {
	c := &checkState{}
	if checkTTL && ttl > 0 {
		c.minPTTL = max((ttl - Drift(ttl, driftFactor)).Milliseconds(), 1)
	}
	return c
}

// unwrapCheck takes the check's fields off master's reply and leaves the
// script's own reply. A reply of another shape (the script raised an
// error) checks nothing: no yes, and the undo as without the check.
// r.mu is held.
func (r *Request) unwrapCheck(master int, rep *resp.Reply) {
	c, bit := r.chk, uint16(1)<<master
	c.seen &^= bit
	c.had &^= bit
	c.holds &^= bit
	if rep.Type != resp.Array || len(rep.Elems) != 5 {
		return
	}
	for _, e := range rep.Elems[1:] {
		if e.Type != resp.Integer {
			return
		}
	}
	c.seen |= bit
	if rep.Elems[1].Int == 1 {
		c.had |= bit
	}
	if rep.Elems[2].Int == 1 {
		c.holds |= bit
	}
	c.pttl[master], c.at[master] = rep.Elems[3].Int, rep.Elems[4].Int
	*rep = rep.Elems[0]
}

// isYes is master's reply rep a yes vote: by the rule, and for a checked
// request only where the master's copy holds the token for long enough.
// r.mu is held.
func (r *Request) isYes(master int, rep *resp.Reply) bool {
	if !r.rule.IsYes(rep, r.nkeys) {
		return false
	}
	c := r.chk
	if c == nil {
		return true
	}
	bit := uint16(1) << master
	if c.seen&bit == 0 || c.holds&bit == 0 {
		return false
	}
	if c.minPTTL == 0 || c.pttl[master] == -1 || c.pttl[master] >= c.minPTTL {
		return true
	}
	r.e.shortCopy(master, r, c.pttl[master])
	return false
}

// shortCopy warns, at most once a minute per master, that master's copy
// of a lock it holds for the caller expires before the validity lockproxy
// would grant: its vote is a no. With an absolute expiry (PXAT,
// PEXPIREAT) the likely cause is the master's clock running ahead of
// lockproxy's; with a relative one, a script setting another TTL than the
// one it was given.
func (e *Engine) shortCopy(master int, r *Request, pttl int64) {
	now := time.Now().UnixMilli()
	last := e.shortLogged[master].Load()
	if now-last < 60_000 || !e.shortLogged[master].CompareAndSwap(last, now) {
		return
	}
	e.cfg.Logger.Warn("master's copy of a lock expires before the validity lockproxy would grant, so its vote counts as no; "+
		"with an absolute expiry (PXAT, PEXPIREAT) this master's clock is ahead of lockproxy's, or it ran the command late, by about the shortfall plus the drift allowance: synchronise the clocks (NTP), check the master's latency; "+
		"otherwise the script set a shorter TTL than the one it was given, or scored the caller's sorted-set member to expire sooner (logged at most once a minute per master)",
		"master", e.cfg.Masters[master], "key", r.Key, "pttl_ms", pttl, "needed_ms", r.chk.minPTTL, "shortfall_ms", r.chk.minPTTL-pttl)
}

// created reports whether a failed acquisition's part on master i is its
// own to undo: it wrote there (applied), and, checked, the token was not
// there before it. A hash count is taken back by one whoever created the
// field. r.mu is held.
func (r *Request) created(i int) bool {
	if !r.applied(i) {
		return false
	}
	return !r.mayBeSpecial() || r.chk == nil || r.undoOp == UndoHashDecr || r.chk.had&(1<<i) == 0
}
