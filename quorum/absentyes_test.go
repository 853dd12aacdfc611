package quorum

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestReleaseAbsentYes: Redisson's unlock before 3.10.6 answers 1 both
// where there is no lock and where it deletes the holder's last count,
// 0 where a count is left, nil where another token holds the lock
// (ScriptOp.AbsentYes :1). The client hears 1 only when the masters that
// may still hold the token (those that answered 0 or an error, and those
// that did not answer) are fewer than a quorum: with masters cut off, the
// 1 of masters that lack the lock tied with a quorum's 0, or came first,
// and a holder at depth 2 heard "released" (found by review). Without
// AbsentYes (Redisson 3.10.6 on, whose unlock answers nil where there is
// no lock) the replies are the script's own and nothing changes.
func TestReleaseAbsentYes(t *testing.T) {
	one, zero, nilR := resp.Reply{Type: resp.Integer, Int: 1}, resp.Reply{Type: resp.Integer}, resp.ReplyNil
	for _, c := range []struct {
		name    string
		replies []any // resp.Reply, or nil: no answer (timed out)
		want    resp.Reply
	}{
		{"3 masters: a lacking master first, a holder cut off", []any{one, zero, nil}, zero},
		{"5 masters: two lacking, two holders' 0, one holder cut off", []any{one, one, zero, zero, nil}, zero},
		{"5 masters: unconfirmed, a lacking master first", []any{one, zero, nilR, nil, nil}, zero},
		{"3 masters: every holder deleted", []any{one, one, nil}, one},
		{"3 masters: a lacking master and a holder's last count", []any{one, one, zero}, one},
		{"5 masters: 0 left on too few to be a quorum", []any{one, one, nilR, zero, nil}, one},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := releaseHeard(t, c.replies); !got.Equal(c.want) {
				t.Errorf("the client hears %v, want %v", got, c.want)
			}
		})
	}
}

// TestReleaseDeletedYes: Redisson's unlock since 3.10.6 (and its spin
// lock's) answers 1 where it deletes the holder's last count, 0 where a
// count is left, nil where the token holds nothing (ScriptOp.DeletedYes
// :1). Where the masters' counts diverge (one a level short: a re-entry or
// a restart it missed), a master that deleted its copy tied with one that
// kept a count, with a holder cut off, and master order gave the holder
// at depth 2 "released" while a quorum held its lock (found by review).
// When the masters agree the client hears what they said.
func TestReleaseDeletedYes(t *testing.T) {
	one, zero, nilR := resp.Reply{Type: resp.Integer, Int: 1}, resp.Reply{Type: resp.Integer}, resp.ReplyNil
	for _, c := range []struct {
		name    string
		replies []any // resp.Reply, or nil: no answer (timed out)
		want    resp.Reply
	}{
		{"3 masters: a short master first, a holder cut off", []any{one, zero, nil}, zero},
		{"3 masters: a holder first, a short master cut off", []any{zero, one, nil}, zero},
		{"5 masters: two short, two counts left, one cut off", []any{one, one, zero, zero, nil}, zero},
		{"5 masters: two short, a count left, two cut off", []any{one, one, zero, nil, nil}, zero},
		{"5 masters: three deleted, a count left on one", []any{one, one, one, zero, nil}, one},
		{"3 masters: deleted, not held, a count left on one", []any{one, nilR, zero}, one},
		{"3 masters: all deleted", []any{one, one, one}, one},
		{"3 masters: all counts left", []any{zero, zero, zero}, zero},
		{"3 masters: deleted on two, one cut off", []any{one, one, nil}, one},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := releaseHeard(t, c.replies); !got.Equal(c.want) {
				t.Errorf("the client hears %v, want %v", got, c.want)
			}
		})
	}
}

// releaseHeard decides a release of Redisson's unlock (deleted :1) over
// the masters' replies (nil: that master timed out) and returns what the
// client hears.
func releaseHeard(t *testing.T, replies []any) resp.Reply {
	t.Helper()
	rule := VoteRule{Type: resp.Integer, Cmp: IntNonNegative}
	e := fakeEngine(len(replies))
	r := &Request{kind: Release, agg: AggVote, rule: &rule, nkeys: 2, noRk: rkNil, deletedYes: rkOne}
	r.e, r.w = e, NewWaiter()
	r.w.pending.Add(1)
	for i, rep := range replies {
		if rep != nil {
			r.Complete(i, rep.(resp.Reply), nil)
		}
	}
	for i, rep := range replies {
		if rep == nil {
			r.Complete(i, resp.Reply{}, down)
		}
	}
	if !r.Decided() || r.err != nil {
		t.Fatalf("decided %v, err %v", r.Decided(), r.err)
	}
	return r.reply
}
