package quorum

import (
	"bytes"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// lockMaster is a one-key master for the late-undo tests, stepped by hand:
// it runs SET NX, a compare-and-delete release ("REL k tok"), a token
// extend ("EXT k tok": compare-and-pexpire, :1/:0), the engine's PEXPIRE
// (extendScript: :1 when the key exists) and the undo script. ext records
// that the current value was extended.
type lockMaster struct {
	fp  *fakePipe
	i   int
	val string // "" = absent
	ext bool
	ran int
}

// checkedReply is a checked script's reply (WrapCheck): inner, whether the
// token was there before and is after, and the PTTL after (the expiry
// time stands at 1 ms past the epoch plus it).
func checkedReply(inner resp.Reply, had, holds bool, pttl int64) resp.Reply {
	b := func(v bool) resp.Reply {
		if v {
			return resp.Reply{Type: resp.Integer, Int: 1}
		}
		return resp.Reply{Type: resp.Integer}
	}
	if !holds {
		pttl = -2
	}
	return resp.Reply{Type: resp.Array, Elems: []resp.Reply{inner, b(had), b(holds), {Type: resp.Integer, Int: pttl}, {Type: resp.Integer, Int: 1 + pttl}}}
}

// step runs the next submitted op; false when none is left.
func (m *lockMaster) step() bool {
	op, ok := m.fp.next(&m.ran)
	if !ok {
		return false
	}
	args := commandArgs(op.Cmd)
	var rep resp.Reply
	switch {
	case bytes.Contains(op.Cmd, []byte(undoScript.SHA1)):
		if m.val == args[len(args)-1] {
			m.val, m.ext = "", false
		}
		return true // fire and forget
	case bytes.Contains(op.Cmd, []byte(shortenScript.SHA1)):
		return true // a granted extend's TTL: the model keeps no TTLs
	case bytes.Contains(op.Cmd, []byte(extendScript.SHA1)):
		rep = resp.Reply{Type: resp.Integer}
		if m.val != "" {
			// {1, digest of the value}: the value itself stands in.
			rep = resp.Reply{Type: resp.Array, Elems: []resp.Reply{{Type: resp.Integer, Int: 1}, {Type: resp.Bulk, Str: []byte(m.val)}}}
		}
		rep = checkedReply(rep, m.val != "", m.val != "", 60_000)
	case args[0] == "EXT":
		rep = resp.Reply{Type: resp.Integer}
		if m.val == args[2] {
			m.ext, rep.Int = true, 1
		}
	case args[0] == "REL":
		rep = resp.Reply{Type: resp.Integer}
		if m.val == args[2] {
			m.val, m.ext, rep.Int = "", false, 1
		}
	case args[0] == "SET":
		rep = resp.ReplyNil
		if m.val == "" {
			m.val, m.ext, rep = args[2], false, resp.ReplyOK
		}
	default:
		panic("model: unknown command " + args[0])
	}
	op.C.Complete(m.i, rep, nil)
	return true
}

// expireNext drops the next op as the pipeline does with one whose deadline
// passed before it was written (the master never runs it).
func (m *lockMaster) expireNext() {
	op, _ := m.fp.next(&m.ran)
	op.C.Complete(m.i, resp.Reply{}, &batching.MasterError{Addr: "m", Err: batching.ErrExpired})
}

func (m *lockMaster) drain() {
	for m.step() {
	}
}

// lockEngine is an engine on five lockMasters, with deadlines long enough
// that the test alone decides what is late.
func lockEngine(t *testing.T) (*Engine, []*lockMaster) {
	t.Helper()
	e, fps := pipedEngine(5, -1)
	e.cfg.NodeTimeout = time.Minute
	ms := make([]*lockMaster, len(fps))
	for i := range fps {
		ms[i] = &lockMaster{fp: fps[i], i: i}
	}
	return e, ms
}

// submitRel submits a compare-and-delete release ("REL k tok") of key
// with tok, as the proxy does for a release script with a known token.
func submitRel(e *Engine, key, tok string) (*Request, *Waiter) {
	w := NewWaiter()
	rel := &Request{kind: Release, agg: AggVote, rule: &YesOne, nkeys: 1, Key: key,
		cmd:   resp.AppendCommand(nil, []byte("REL"), []byte(key), []byte(tok)),
		token: []byte(tok),
		noRk:  rkZero, t0: batching.Now()}
	e.Submit(w, rel)
	return rel, w
}
