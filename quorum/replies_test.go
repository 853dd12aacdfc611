package quorum

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestReplyKeptExactly: whatever a master answers, replyAt gives back the
// same Reply field for field, whether rk holds it or r.ext does, and the
// yes bit is the one recorded.
func TestReplyKeptExactly(t *testing.T) {
	for _, rep := range []resp.Reply{
		resp.ReplyOK,
		resp.ReplyNil,
		{Type: resp.Integer},
		{Type: resp.Integer, Int: 1},
		{Type: resp.Integer, Int: 2},
		{Type: resp.Integer, Int: -1},
		{Type: resp.Status, Str: []byte("QUEUED")},
		{Type: resp.Status, Str: []byte("OK"), Elems: []resp.Reply{}}, // not as the parser gives it: kept whole
		{Type: resp.Bulk, Str: []byte("OK")},
		{Type: resp.Bulk, Str: []byte{}},
		{Type: resp.Error, Str: []byte("ERR x")},
		{Type: resp.Array, Elems: []resp.Reply{{Type: resp.Integer, Int: 1}, resp.ReplyNil}},
		{Type: resp.Array, Elems: []resp.Reply{}},
		{Type: resp.Boolean, Int: 1},
		{}, // no reply
	} {
		for _, yes := range []bool{false, true} {
			r := &Request{}
			r.putReply(3, &rep, rkOf(&rep), yes)
			if got := r.replyAt(3); !reflect.DeepEqual(got, rep) {
				t.Errorf("put %#v, got back %#v", rep, got)
			}
			if r.yesAt(3) != yes {
				t.Errorf("%#v: yes %v, recorded %v", rep, yes, r.yesAt(3))
			}
			if got := r.replyAt(2); !reflect.DeepEqual(got, resp.Reply{}) {
				t.Errorf("a master that did not answer reads %#v", got)
			}
		}
	}
}

// TestRecycledRequestForgetsReplies: a pooled Request keeps its ext for
// the next command but none of its replies or errors.
func TestRecycledRequestForgetsReplies(t *testing.T) {
	var seen *Request
	onRecycle = func(r *Request) { seen = r }
	defer func() { onRecycle = nil }()
	r := NewRequest()
	tok := resp.Reply{Type: resp.Bulk, Str: []byte("token")}
	r.putReply(0, &tok, rkOf(&tok), false)
	r.extOf().errs[1] = errors.New("down")
	ext := r.ext
	r.refs.Store(1)
	r.unref()
	if seen != r {
		t.Fatal("the request was not recycled")
	}
	if r.ext != ext {
		t.Error("the recycled request dropped its ext")
	}
	if !reflect.DeepEqual(*ext, reqExt{}) || r.extDirty || r.rk != [MaxMasters]uint8{} {
		t.Errorf("the recycled request still holds replies or errors: %+v", *ext)
	}
	if got := r.replyAt(0); !reflect.DeepEqual(got, resp.Reply{}) || r.errAt(1) != nil {
		t.Errorf("after recycling: reply %#v, err %v", got, r.errAt(1))
	}
}

// TestPreparedVoteIsTheRules: a dispatched request decides a common
// reply's vote from the bits prepareVote set, without reading its rule;
// for every rule and key count that must be the rule's own answer, and a
// request with a check or re-entrant counts must not take that path.
func TestPreparedVoteIsTheRules(t *testing.T) {
	rules := map[string]*VoteRule{
		"YesOK": &YesOK, "YesOne": &YesOne, "YesPositive": &YesPositive, "YesNumKeys": &YesNumKeys,
		"YesNonNegative": &YesNonNegative, "YesNotNil": &YesNotNil, "YesSameValue": &YesSameValue, "YesZero": &YesZero,
		"nil": {Type: resp.Nil}, "bulk OK": {Type: resp.Bulk, Str: "OK"}, "status or bulk OK": {Type: resp.Status, Str: "OK", OrBulk: true},
		"any status": {Type: resp.Status, AnyStr: true}, "any integer": {Type: resp.Integer, Cmp: IntAny},
	}
	replies := []resp.Reply{resp.ReplyOK, resp.ReplyNil, {Type: resp.Integer}, {Type: resp.Integer, Int: 1},
		{Type: resp.Integer, Int: 2}, {Type: resp.Bulk, Str: []byte("OK")}, {Type: resp.Error, Str: []byte("ERR")}}
	for name, rule := range rules {
		for _, nkeys := range []int{0, 1, 2} {
			r := &Request{agg: AggVote, rule: rule, nkeys: nkeys}
			r.prepareVote()
			if r.mayBeSpecial() {
				t.Fatalf("%s: a request without check or counts is taken for one", name)
			}
			for _, rep := range replies {
				want := rule.IsYes(&rep, nkeys)
				if got := r.voteOf(0, &rep, rkOf(&rep)); got != want {
					t.Errorf("%s, %d keys, reply %#v: prepared vote %v, the rule says %v", name, nkeys, rep, got, want)
				}
			}
		}
	}
	for _, r := range []*Request{
		{agg: AggVote, rule: &YesOK, chk: &checkState{}},
		{agg: AggVote, rule: &YesOK, reent: &reentState{}},
		{agg: AggVote, rule: &YesOK}, // not prepared
	} {
		if r.chk != nil || r.reent != nil {
			r.prepareVote()
		}
		if !r.mayBeSpecial() {
			t.Errorf("%+v: its chk and reent would not be read", r)
		}
	}
	r := &Request{agg: AggValue, rule: &YesOK}
	r.prepareVote()
	if r.voteOf(0, &resp.ReplyOK, rkOK) {
		t.Error("a reply to a request that is no vote counted as a yes")
	}
}
