package quorum

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestReentrantYes: which yes votes of a re-entrant acquisition count.
// after[i] is master i's count once the script ran (-2: no answer yet), yes
// whether it said yes.
func TestReentrantYes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  []int64
		yes    []bool
		want   int32
		extend bool
	}{
		{"first acquisition on all", []int64{1, 1, 1}, []bool{true, true, true}, 3, false},
		{"first acquisition, one master held by another", []int64{1, 1, 0}, []bool{true, true, false}, 2, false},
		{"re-entry on all", []int64{2, 2, 2}, []bool{true, true, true}, 3, false},
		// The review's case: held on 0 and 1, master 0 away, master 2
		// takes the free key: only master 1 is shown to hold the depth.
		{"re-entry taking a free key", []int64{-2, 2, 1}, []bool{false, true, true}, 1, false},
		// With every master answering, D is the Q-th largest: masters 0
		// and 1 held 1 (a quorum), so both count, master 2 does not.
		{"re-entry with all answering after a partition", []int64{2, 2, 1}, []bool{true, true, true}, 2, false},
		// Master 0 holds one more than the depth (it missed a release):
		// all answering, D is 1 and every master counts.
		{"an over-count does not block", []int64{3, 2, 2}, []bool{true, true, true}, 3, false},
		// The same with master 2 away: D is the largest of two, 2, and
		// only master 0 is shown to hold it; more answers may change that.
		{"an over-count among two answers", []int64{3, 2, -2}, []bool{true, true, false}, 1, false},
		{"a yes with an unknown count", []int64{-1, 2, 2}, []bool{true, true, true}, 2, false},
		// An error from master 1 (count unknown) while masters 0 and 1
		// held depth 2: it ranks above the known counts, so D is 2, not
		// 1, and only master 0 is shown to hold it.
		{"an error's unknown count does not lower D", []int64{3, -1, 2}, []bool{true, false, true}, 1, false},
		// Renewals leave the count: they count where it is at least D.
		{"renewal on all", []int64{2, 2, 2}, []bool{true, true, true}, 3, true},
		{"renewal of a low count with the depth's master away", []int64{-2, 2, 1}, []bool{false, true, true}, 1, true},
		{"renewal with all answering", []int64{2, 2, 1}, []bool{true, true, true}, 2, true},
		{"renewal where the token holds nothing", []int64{0, 0, 0}, []bool{true, true, true}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := fakeEngine(len(tc.after))
			r := &Request{e: e, agg: AggVote, rule: &VoteRule{Type: resp.Nil}, reent: &reentState{extend: tc.extend}}
			for i, c := range tc.after {
				if c == -2 {
					continue
				}
				r.state[i], r.reent.count[i] = replied, c
				if tc.yes[i] {
					r.rk[i] |= rkYes
				}
			}
			if got := r.reentrantYes(); got != tc.want {
				t.Errorf("counts after %v, yes %v: %d yes votes count, want %d", tc.after, tc.yes, got, tc.want)
			}
		})
	}
}

// TestUnwrapReentrant: the wrapped script's {reply, count} answer.
func TestUnwrapReentrant(t *testing.T) {
	e := fakeEngine(3)
	r := &Request{e: e, reent: &reentState{}}
	for _, tc := range []struct {
		in        resp.Reply
		want      resp.Reply
		wantCount int64
	}{
		{resp.Reply{Type: resp.Array, Elems: []resp.Reply{resp.ReplyNil, {Type: resp.Bulk, Str: []byte("2")}}}, resp.ReplyNil, 2},
		{resp.Reply{Type: resp.Array, Elems: []resp.Reply{{Type: resp.Integer, Int: 2900}, resp.ReplyNil}}, resp.Reply{Type: resp.Integer, Int: 2900}, 0},
		{resp.Reply{Type: resp.Error, Str: []byte("ERR boom")}, resp.Reply{Type: resp.Error, Str: []byte("ERR boom")}, -1},
		{resp.Reply{Type: resp.Array, Elems: []resp.Reply{resp.ReplyNil, {Type: resp.Bulk, Str: []byte("x")}}}, resp.ReplyNil, -1},
	} {
		rep := tc.in
		r.unwrapReentrant(0, &rep)
		if !rep.Equal(tc.want) || r.reent.count[0] != tc.wantCount {
			t.Errorf("%v: reply %v count %d, want %v %d", tc.in, rep, r.reent.count[0], tc.want, tc.wantCount)
		}
	}
}
