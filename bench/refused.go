package bench

import (
	"cmp"
	"slices"
	"sort"
	"time"
)

// Refused while free. Several lockproxies on one master set can split a
// vote: each sends its SET NX to every master, the masters see them in
// different orders, each proxy gets a minority, answers nil and undoes it.
// Nobody holds the key, yet every contender was told it is held. The
// multiproxy scenario counts such refusals from what its workers recorded
// on the benchmark's own monotonic clock:
//
//   - a refused attempt is the interval [sent, reply] of a SET NX that got
//     nil;
//   - a lock is held from the moment its token is on a quorum of masters
//     (its grant) until a quorum no longer has it (its release);
//   - a refused attempt was refused while free when no hold of its key
//     meets its interval at any moment.
//
// The workers do not see grants and releases happen on the masters, only
// the replies: a grant happens between the SET NX being sent and its +OK
// being read, a release between the release script being sent and its
// reply being read. So there are three measures of a hold:
//
//   - Upper: [+OK read, release sent], when it was surely held. A refusal
//     that meets no such interval may still have met a hold, so this
//     counts too many, never too few: an upper bound. Its error shows with
//     one proxy, which queues the attempts on a key one behind the other
//     and answers those that waited behind a grant at once: the worker of
//     a loser may read its nil before the winner's worker reads the +OK.
//   - Lower: [SET NX sent, release answered], when it may have been held;
//     an attempt that got no reply (network error, or cut short by the end
//     of the run) and a release that failed count as holding for the whole
//     TTL. This counts too few, never too many: a lower bound. It misses a
//     split whose next winner sent its SET NX before the split's losers
//     read their nil, and refusals while a release was under way.
//   - Estimate: from the middle of the granting attempt to the middle of
//     the release, as if each command were applied half-way through its
//     round trip (a winner is never queued in lockproxy: whatever waited
//     behind a grant or a refusal on its key is refused with it), and as
//     if failed releases and attempts without a reply had not held the
//     key past their reply: under faults it counts too many.
//
// The masters' MONITOR streams give the truth (truth.go), which the targets
// judge; the three measures are kept for runs without MONITOR
// (Config.MultiProxyNoMonitor), and the report shows how far each is from
// the truth. With one proxy the truth and Lower must be 0, and Estimate
// about 0, as long as every master answers within node_timeout (a master
// that does not leaves keys behind that refuse attempts while no quorum
// holds the key, whatever the number of proxies).

// Measure names one way of telling holds from the workers' records.
type Measure int

// The measures, in the order Refusals lists them.
const (
	Estimate Measure = iota
	Upper
	Lower
	numMeasures
)

// span is an interval of the run's clock, both ends included.
type span struct{ from, to time.Duration }

// union sorts spans and merges those that meet, in place.
func union(s []span) []span {
	slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	out := s[:0]
	for _, x := range s {
		if n := len(out); n > 0 && x.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, x.to)
			continue
		}
		out = append(out, x)
	}
	return out
}

// meets reports whether [a, b] meets a span of u (sorted and disjoint).
func meets(u []span, a, b time.Duration) bool {
	i := sort.Search(len(u), func(i int) bool { return u[i].to >= a })
	return i < len(u) && u[i].from <= b
}

// Refusals counts the attempts of one run sent and answered within the
// counted window.
type Refusals struct {
	// Attempts got +OK or nil; Refused got nil.
	Attempts, Refused int64
	// Free counts, by Measure, the refusals that came while the key was
	// free.
	Free [numMeasures]int64
	// With the masters' record (Truth set, truth.go): TruthFree refusals
	// met no hold, and TooMany and TooFew are, by Measure, the refusals it
	// counted though the record does not, and the other way round.
	// Unbacked counts the +OK the record does not show as a quorum reached
	// during the attempt (its check of itself: 0), Unowned the quorums no
	// +OK owns, CutShort the holds whose token fell below a quorum before
	// the holder released it (truth.go).
	Truth                       bool
	TruthFree                   int64
	TooMany, TooFew             [numMeasures]int64
	Unbacked, Unowned, CutShort int64
	// With Truth (why.go): Why counts the refusals while free by cause,
	// Unreachable those sent while fewer than a quorum of masters were
	// free of left-over tokens and not paused; Leftovers the left-over
	// stays that began in the window and LeftoversResent those of them
	// re-sent; FreeWait is the median time from sending to the nil reply
	// of the refusals while free.
	Why                                     [numCauses]int64
	Unreachable, Leftovers, LeftoversResent int64
	FreeWait                                time.Duration
	// Overlaps counts the holds that began while another worker held the
	// same key, by the workers' own clock ([+OK read, release sent]): two
	// holders at once. It needs no MONITOR.
	Overlaps int64
}

// heldBy returns, per key and by measure, the union of the holds the
// workers recorded.
func heldBy(logs []contentionLog, keys int) [numMeasures][][]span {
	var held [numMeasures][][]span
	for m := range held {
		held[m] = make([][]span, keys)
	}
	add := func(m Measure, k int32, s span) { held[m][k] = append(held[m][k], s) }
	for _, l := range logs {
		for _, h := range l.holds {
			add(Upper, h.key, span{h.reply, h.releaseSent})
			add(Estimate, h.key, span{(h.sent + h.reply) / 2, (h.releaseSent + h.released) / 2})
			end := h.released
			if h.releaseFailed {
				end = max(end, h.sent+lockTTL)
			}
			add(Lower, h.key, span{h.sent, end})
		}
		for _, a := range l.attempts {
			if a.outcome == unknown {
				add(Lower, a.key, span{a.sent, a.sent + lockTTL})
			}
		}
	}
	for m := range held {
		for k := range held[m] {
			held[m][k] = union(held[m][k])
		}
	}
	return held
}

// classify counts the attempts of logs sent and answered (+OK or nil)
// within [from, to] on keys keys. quorum, when not nil, are the masters'
// holds (truth.go); the refusals while free they show are appended to
// free, when not nil, for explain (why.go).
func classify(logs []contentionLog, keys int, from, to time.Duration, quorum [][]quorumHold, free *[]freeAttempt) Refusals {
	held := heldBy(logs, keys)
	r := Refusals{Truth: quorum != nil, Overlaps: overlaps(logs, keys)}
	var truth [][]span
	if quorum != nil {
		truth, r.Unbacked, r.Unowned, r.CutShort = grantedHolds(logs, quorum)
	}
	var waits []time.Duration
	for _, l := range logs {
		for _, a := range l.attempts {
			if (a.outcome != granted && a.outcome != refused) || a.sent < from || a.reply > to {
				continue
			}
			r.Attempts++
			if a.outcome != refused {
				continue
			}
			r.Refused++
			isFree := truth != nil && !meets(truth[a.key], a.sent, a.reply)
			r.TruthFree += b2i(isFree)
			if isFree {
				waits = append(waits, a.reply-a.sent)
				if free != nil {
					*free = append(*free, freeAttempt{a.key, a.sent})
				}
			}
			for m := range numMeasures {
				says := !meets(held[m][a.key], a.sent, a.reply)
				r.Free[m] += b2i(says)
				if truth != nil {
					r.TooMany[m] += b2i(says && !isFree)
					r.TooFew[m] += b2i(isFree && !says)
				}
			}
		}
	}
	r.FreeWait = mergeLatencies([][]time.Duration{waits}).Quantile(0.5)
	return r
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// overlaps counts the holds whose [+OK read, release sent] meets another
// hold of the same key.
func overlaps(logs []contentionLog, keys int) int64 {
	byKey := make([][]span, keys)
	for _, l := range logs {
		for _, h := range l.holds {
			byKey[h.key] = append(byKey[h.key], span{h.reply, h.releaseSent})
		}
	}
	var n int64
	for _, s := range byKey {
		slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.from, b.from) })
		var end time.Duration = -1
		for _, x := range s {
			if x.from <= end {
				n++
			}
			end = max(end, x.to)
		}
	}
	return n
}
