package bench

import (
	"testing"
	"time"
)

// TestLeftoverStays: a token that stays a second or more on a master
// without holding a quorum is left over (re-sent when its SET NX reached
// that master again meanwhile); the lock itself and short stays are not.
func TestLeftoverStays(t *testing.T) {
	start := time.Unix(1700000000, 0)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	set := func(d time.Duration, k int32, tok uint64) monitorEvent {
		return monitorEvent{at: at(d), key: k, token: tok}
	}
	del := func(d time.Duration, k int32) monitorEvent { return monitorEvent{at: at(d), key: k, del: true} }
	events := [][]monitorEvent{
		{set(ms(10), 0, 7), set(ms(20), 0, 7), set(ms(30), 0, 8), del(ms(1500), 0)}, // 7 stays 1.49s, re-sent
		{set(ms(10), 0, 9), del(ms(12), 0), set(ms(100), 0, 5), del(ms(1400), 0)},   // 9 short; 5 is the lock's
		{set(ms(100), 1, 3)}, // 3 never deleted: stays to the end
		{set(ms(100), 1, 4), del(ms(400), 1), set(ms(500), 9, 1)}, // short; key 9 out of range
	}
	holds := [][]quorumHold{{{span{ms(100), ms(1400)}, 5}}, nil}
	got := leftoverStays(events, 2, start, ms(2000), holds)
	want := [][]stay{{{span{ms(10), ms(1500)}, 7, true}}, {{span{ms(100), ms(2000)}, 3, false}}}
	if len(got) != 2 || len(got[0]) != 1 || got[0][0] != want[0][0] || len(got[1]) != 1 || got[1][0] != want[1][0] {
		t.Fatalf("leftoverStays = %+v, want %+v", got, want)
	}
	if !blockedAt(got[0], ms(1000)) || blockedAt(got[0], ms(1600)) {
		t.Error("blockedAt")
	}

	logs := []contentionLog{{attempts: []attempt{
		{key: 0, sent: ms(500), reply: ms(501), outcome: refused},   // free, a left-over token there
		{key: 0, sent: ms(1600), reply: ms(1650), outcome: refused}, // free, none
		{key: 0, sent: ms(1700), reply: ms(1701), outcome: granted},
	}}}
	r := classify(logs, 2, 0, ms(3000), [][]quorumHold{nil, nil}, got)
	if r.TruthFree != 2 || r.FreeBlocked != 1 || r.Leftovers != 2 || r.LeftoversResent != 1 || r.FreeWait != ms(1) {
		t.Errorf("classify = %+v", r)
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
