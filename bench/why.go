package bench

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Why a refusal came while the key was free. What the masters held when
// the refused attempt was sent, from their MONITOR record (truth.go), and
// whose attempts those tokens were, from the workers' logs, give its cause:
//
//   - CauseSplit: contenders' attempts being decided hold minorities of the
//     masters until each is undone, about a round trip: every attempt
//     meanwhile is refused, though no quorum holds the key;
//   - CauseSlow: the same, but one of those attempts waits node_timeout or
//     longer for a master that does not answer (a paused one): it can
//     neither win nor be undone before then, and keeps its masters;
//   - CauseLeftover: a left-over token sits on a master: one whose undo
//     was never sent (lockproxy's INFO counts undo_unconfirmed). It
//     refuses every other attempt there until its owner acquires and
//     releases the lock or its TTL ends; with a few of them on the key (3
//     of 5 masters) no attempt can reach a quorum at all.
//
// A token's stay on a master is left over from the moment its own client's
// SET NX reached that master again while it was there (*re-sent*: a retry
// with the same token, as lock libraries make, which that master refuses:
// lockproxy never undoes an attempt's late write once a later write of the
// same token went to that master), or once it lasted leftoverAge: an
// attempt and its undo take a round trip, node_timeout (50ms) and a split
// vote's retry at most, so a second is twenty times any legitimate stay.
const leftoverAge = time.Second

// Cause names why a refusal while free came.
type Cause int

// The causes, in the order Refusals.Why lists them.
const (
	CauseSplit Cause = iota
	CauseSlow
	CauseLeftover
	numCauses
)

// stayState is the token a master holds on a key, since when, and when it
// was first re-sent there (0: never).
type stayState struct {
	token              uint64
	since, firstResent time.Duration
}

func (s stayState) leftOverAt(t time.Duration) bool {
	return s.token != 0 && ((s.firstResent > 0 && s.firstResent <= t) || t-s.since >= leftoverAge)
}

// freeAttempt is a refusal while free to explain.
type freeAttempt struct {
	key  int32
	sent time.Duration
}

// whyFree is what explain found.
type whyFree struct {
	// why counts the refusals while free by cause; unreachable those of
	// them sent while fewer than q masters were free of left-over tokens
	// and not paused: nobody could get the lock.
	why         [numCauses]int64
	unreachable int64
	// leftovers are the left-over stays that began in the window,
	// resent those of them re-sent.
	leftovers, resent int64
}

// explain replays the masters' events and classifies each refusal while
// free by what the masters held when it was sent; slow is the attempt
// duration that marks a contender waiting for a master that does not
// answer, q the quorum and paused the number of masters paused for the
// whole run. It also counts the left-over stays that began within
// [from, to], and those of them that were re-sent.
func explain(events [][]monitorEvent, keys int, start time.Time, logs []contentionLog, free []freeAttempt,
	from, to, slow time.Duration, q, paused int) (w whyFree) {
	owners := map[uint64][]span{} // token → its attempts, [sent, reply]
	for _, l := range logs {
		for _, a := range l.attempts {
			owners[a.token] = append(owners[a.token], span{a.sent, a.reply})
		}
	}
	slowAt := func(tok uint64, t time.Duration) bool {
		for _, a := range owners[tok] {
			if a.from <= t && t <= a.to && a.to-a.from >= slow {
				return true
			}
		}
		return false
	}
	slices.SortFunc(free, func(a, b freeAttempt) int { return cmp.Compare(a.sent, b.sent) })
	state := make([][]stayState, keys)
	for k := range state {
		state[k] = make([]stayState, len(events))
	}
	count := func(s stayState, end time.Duration) {
		if s.token == 0 || s.since < from || s.since > to || !s.leftOverAt(end) {
			return
		}
		w.leftovers++
		w.resent += b2i(s.firstResent > 0)
	}
	judge := func(a freeAttempt) {
		c, left := CauseSplit, 0
		for _, s := range state[a.key] {
			switch {
			case s.leftOverAt(a.sent):
				c = CauseLeftover
				left++
			case c == CauseSplit && s.token != 0 && slowAt(s.token, a.sent):
				c = CauseSlow
			}
		}
		w.why[c]++
		w.unreachable += b2i(c == CauseLeftover && len(events)-paused-left < q)
	}
	var end time.Duration
	for _, me := range mergeStreams(events) {
		at := me.at.Sub(start)
		for len(free) > 0 && free[0].sent < at {
			judge(free[0])
			free = free[1:]
		}
		end = max(end, at)
		if int(me.key) >= keys {
			continue
		}
		s := &state[me.key][me.master]
		switch {
		case me.del:
			count(*s, at)
			*s = stayState{}
		case s.token == 0:
			*s = stayState{token: me.token, since: at}
		case me.token == s.token && s.firstResent == 0:
			s.firstResent = at
		}
	}
	for _, a := range free {
		judge(a)
	}
	for _, ss := range state {
		for _, s := range ss {
			count(s, max(end, to))
		}
	}
	return w
}

// ProxyStats are the counters of lockproxy's INFO stats that explain
// refusals while free, summed over the proxies of a run.
type ProxyStats struct {
	// SplitRetries: lost votes with yes votes, tried once more
	// (split_vote_retries).
	SplitRetries int64
	// UndoSent and UndoUnconfirmed: undos queued, and undos not sent
	// because the outcome on a master was unknown or a later write of
	// the key went there first (the key is left to its TTL).
	UndoSent, UndoUnconfirmed int64
}

func (s ProxyStats) sub(o ProxyStats) ProxyStats {
	return ProxyStats{s.SplitRetries - o.SplitRetries, s.UndoSent - o.UndoSent, s.UndoUnconfirmed - o.UndoUnconfirmed}
}

// parseProxyStats reads ProxyStats out of INFO's text; missing fields
// are 0.
func parseProxyStats(info string) ProxyStats {
	var s ProxyStats
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "split_vote_retries":
			s.SplitRetries = n
		case "undo_sent":
			s.UndoSent = n
		case "undo_unconfirmed":
			s.UndoUnconfirmed = n
		}
	}
	return s
}

// proxyStats sums the counters of the proxies at addrs; a proxy that does
// not answer counts 0.
func proxyStats(ctx context.Context, addrs []string) ProxyStats {
	var sum ProxyStats
	for _, a := range addrs {
		c := newClient(a, 1)
		info, _ := c.Info(ctx, "stats").Result()
		c.Close()
		s := parseProxyStats(info)
		sum.SplitRetries += s.SplitRetries
		sum.UndoSent += s.UndoSent
		sum.UndoUnconfirmed += s.UndoUnconfirmed
	}
	return sum
}
