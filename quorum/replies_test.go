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
			r.putReply(3, &rep, yes)
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
	r.putReply(0, &resp.Reply{Type: resp.Bulk, Str: []byte("token")}, false)
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
