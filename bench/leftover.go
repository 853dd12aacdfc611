package bench

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Why a refusal came while the key was free. Two causes show in the
// masters' MONITOR record (truth.go):
//
//   - a split vote under way: contenders' SET NX hold minorities of the
//     masters until each is undone, for one round trip, or until
//     node_timeout when a master does not answer (paused): every attempt
//     meanwhile is refused, though no quorum holds the key;
//   - left-over tokens: a token that stays on a master long after the
//     attempt that wrote it lost, because its undo was never sent (the
//     proxies' INFO counts it as undo_unconfirmed): it refuses every
//     other attempt there until its TTL. With a few of them on the key
//     (two masters of five), no attempt can reach a quorum at all.
//
// A token's stay on a master is left over when it lasted leftoverAge or
// more without its token holding a quorum (truth.go's holds): an attempt
// and its undo take a round trip, node_timeout (50ms) and a split vote's
// retry at most, so a second is twenty times any legitimate stay. A stay
// whose token was sent again to that master meanwhile (a SET NX the
// master refused: the same client retrying with its token, as lock
// libraries do) is counted apart: lockproxy drops the late undo of an
// attempt once a later write of the same token went to that master.
const leftoverAge = time.Second

// stay is one token on one master over span.
type stay struct {
	span
	token  uint64
	resent bool // a SET NX of the same token reached the master meanwhile
}

// leftoverStays replays each master's events (its own order) and returns,
// per key, the stays of tokens that lasted leftoverAge or more without
// their token holding a quorum (holds, from quorumHolds). A token still
// there at the end of the record stays until end.
func leftoverStays(events [][]monitorEvent, keys int, start time.Time, end time.Duration, holds [][]quorumHold) [][]stay {
	out := make([][]stay, keys)
	keep := func(k int32, s stay) {
		if s.to-s.from < leftoverAge {
			return
		}
		for _, h := range holds[k] {
			if h.token == s.token && h.from <= s.to && s.from <= h.to {
				return // the lock itself
			}
		}
		out[k] = append(out[k], s)
	}
	for _, es := range events {
		cur := make([]stay, keys) // token 0: none
		for _, e := range es {
			k := e.key
			if int(k) >= keys {
				continue
			}
			at := e.at.Sub(start)
			switch {
			case e.del && cur[k].token != 0:
				cur[k].to = at
				keep(k, cur[k])
				cur[k] = stay{}
			case !e.del && cur[k].token == 0 && e.token != 0:
				cur[k] = stay{span: span{at, at}, token: e.token}
			case !e.del && e.token == cur[k].token:
				cur[k].resent = true
			}
		}
		for k := range cur {
			if cur[k].token != 0 {
				cur[k].to = max(end, cur[k].from)
				keep(int32(k), cur[k])
			}
		}
	}
	return out
}

// blockedAt reports whether a left-over stay of ss covers t.
func blockedAt(ss []stay, t time.Duration) bool {
	for _, s := range ss {
		if s.from <= t && t <= s.to {
			return true
		}
	}
	return false
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
