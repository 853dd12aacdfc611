package bench

import (
	"slices"
	"testing"
	"time"
)

// TestExplain: a refusal while free is blamed on a left-over token when a
// master held one (re-sent, or there for a second), else on a slow
// contender when a master held the token of an attempt in flight for
// node_timeout or more, else on a split.
func TestExplain(t *testing.T) {
	start := time.Unix(1700000000, 0)
	set := func(d time.Duration, k int32, tok uint64) monitorEvent {
		return monitorEvent{at: start.Add(d), key: k, token: tok}
	}
	del := func(d time.Duration, k int32) monitorEvent { return monitorEvent{at: start.Add(d), key: k, del: true} }
	events := [][]monitorEvent{
		// Token 7 of key 0, re-sent at 20ms: left over from then to 1500ms.
		{set(ms(10), 0, 7), set(ms(20), 0, 7), set(ms(30), 0, 8), del(ms(1500), 0)},
		// Token 9 of a slow attempt (in flight 100–160ms), then 5 for 1.3s.
		{set(ms(100), 1, 9), del(ms(165), 1), set(ms(200), 1, 5), del(ms(1500), 1)},
		// Token 3 never deleted: left over a second after 100ms; key 9 is
		// out of range.
		{set(ms(100), 0, 3), set(ms(500), 9, 1)},
		{set(ms(600), 1, 4), del(ms(602), 1)},
	}
	logs := []contentionLog{{attempts: []attempt{
		{key: 1, token: 9, sent: ms(100), reply: ms(160), outcome: refused},
		{key: 1, token: 4, sent: ms(599), reply: ms(601), outcome: refused},
	}}}
	free := []freeAttempt{
		{0, ms(15)},   // 7 not re-sent yet, 3 not there: split
		{0, ms(25)},   // 7 re-sent: left over
		{1, ms(120)},  // 9's attempt in flight for 60ms: slow
		{1, ms(150)},  // likewise
		{1, ms(600)},  // 5 there 400ms, 4 in flight 2ms: split
		{1, ms(1300)}, // 5 there 1.1s: left over
		{0, ms(1600)}, // 3 there 1.5s: left over
	}
	w := explain(events, 2, start, logs, slices.Clone(free), 0, ms(2000), ms(50), 3, 0)
	// 7 (re-sent), 5 (1.3s) and 3 (to the end, 2s): three left over.
	want := whyFree{why: [numCauses]int64{CauseSplit: 2, CauseSlow: 2, CauseLeftover: 3}, leftovers: 3, resent: 1}
	if w != want {
		t.Errorf("explain = %+v, want %+v", w, want)
	}
	// With one of the 4 masters paused, one left-over token leaves 2: no
	// quorum of 3 for anyone.
	want.unreachable = 3
	if w := explain(events, 2, start, logs, free, 0, ms(2000), ms(50), 3, 1); w != want {
		t.Errorf("explain, 1 paused = %+v, want %+v", w, want)
	}
}

func TestParseProxyStats(t *testing.T) {
	info := "# Stats\r\ntotal_commands_processed:10\r\nundo_sent:1797\r\nundo_lost:0\r\nundo_unconfirmed:17\r\nsplit_vote_retries:582\r\nbad:x\r\n"
	want := ProxyStats{SplitRetries: 582, UndoSent: 1797, UndoUnconfirmed: 17}
	if got := parseProxyStats(info); got != want {
		t.Errorf("parseProxyStats = %+v, want %+v", got, want)
	}
	if got := want.sub(ProxyStats{SplitRetries: 2, UndoSent: 7, UndoUnconfirmed: 7}); got != (ProxyStats{580, 1790, 10}) {
		t.Errorf("sub = %+v", got)
	}
}

func TestParseLoadAvg(t *testing.T) {
	for in, want := range map[string]float64{"3.55 4.60 4.89 3/321 2210\n": 3.55, "": -1, "x 1 2": -1} {
		if got := parseLoadAvg(in); got != want {
			t.Errorf("parseLoadAvg(%q) = %v, want %v", in, got, want)
		}
	}
	if fmtLoad(-1) != "–" || fmtLoad(3.55) != "3.5" && fmtLoad(3.55) != "3.6" {
		t.Errorf("fmtLoad: %q %q", fmtLoad(-1), fmtLoad(3.55))
	}
}
