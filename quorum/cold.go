package quorum

import "github.com/lockproxy/lockproxy/internal/resp"

// What only uncommon requests set: script no-replies other than the
// common ones, multi-key and counter fields, a retry's parent, large
// commands' accounting, supersede records. Kept out of Request, whose
// every line a recycle zeroes and whose lines hundreds in flight keep in
// cache: the common operations (SET NX, the release and extend scripts)
// set none of it. Like r.ext (replies.go), r.cold is allocated on first
// use and kept with a pooled Request, cleared when recycled only if it
// was written.
//
// Unlike r.ext, r.cold is set only while one goroutine owns r: by its
// constructor or the proxy before Submit, or by dispatch before r is
// handed to the deadlines and the masters (admitBig, supersede). It does
// not change after, so it is read without a lock: nil reads as zero
// values. A field written later must live elsewhere (ext, sup).
type reqCold struct {
	// noReply: the reply when the vote is lost and no master said
	// otherwise, when it is none of the common replies (noRk).
	noReply resp.Reply
	// A split vote's retry (retry.go) runs as a child request on behalf
	// of parent, which publishes its outcome; the child holds a reference
	// to the parent, whose command it aliases. So does a counter's
	// continuation (counter.go).
	parent *Request
	// load, for a script not loaded on every master connection: its body
	// and sha1, loaded on a master before its first use there.
	load *ScriptOp
	// keys: the keys of a script over several KEYS with no single lock
	// key (supersede); they alias cmd.
	keys      [][]byte
	undoExtra [][]byte // UndoZRem: members the acquisition adds besides the token; UndoJSONField: the field
	// fence: the counter a fenced acquisition increments once granted
	// (counter.go); it aliases cmd. fenceAt: where the token goes in the
	// yes reply: 0 the reply itself, i its i-th element.
	fence   []byte
	fenceAt int32
	// skip: masters this request is not sent to (a split vote's retry
	// skips those where its parent's part is still unknown).
	skip uint16
	// sups: the failed acquisitions this request, a later write of their
	// token, superseded (supersede.go); Request.supLeft says for which
	// masters they still wait. Set by supersede in dispatch, then changed
	// by resolveSups under r.mu.
	sups []*Request
	// bigBytes is cmd's length when it counts against each master's
	// Engine.big, and work what each master spends matching it (a
	// PUBLISH, SetMasterWork) when it counts against Engine.work (big.go),
	// until that master completes it; bigSkip: the masters it is not sent
	// to, which had no room (nothing is counted there).
	bigBytes, work int64
	bigSkip        uint64
}

// coldOf returns r.cold, allocating it on first use, and marks it to be
// cleared when r is recycled. Only r's owner calls it, before r is shared
// (see reqCold).
func (r *Request) coldOf() *reqCold {
	if r.cold == nil {
		r.cold = new(reqCold)
	}
	r.coldDirty = true
	return r.cold
}

// noReply is the reply when the vote is lost and no master said
// otherwise: one of the common replies (noRk), or r.cold's.
func (r *Request) noReply() resp.Reply {
	if r.noRk != rkExt {
		return commonReply(r.noRk)
	}
	if r.cold == nil {
		return resp.Reply{}
	}
	return r.cold.noReply
}

// setNoReply sets what noReply returns. r's owner calls it, before r is
// shared.
func (r *Request) setNoReply(rep resp.Reply) {
	r.noRk = rkOf(&rep)
	if r.noRk == rkExt && (rep.Type != 0 || rep.Int != 0 || rep.Str != nil || rep.Elems != nil) {
		r.coldOf().noReply = rep
	}
}

// parent is the request r runs on behalf of (a retry's or a
// continuation's), nil for a client's own.
func (r *Request) parent() *Request {
	if r.cold == nil {
		return nil
	}
	return r.cold.parent
}

// skip is the masters r is not sent to.
func (r *Request) skip() uint16 {
	if r.cold == nil {
		return 0
	}
	return r.cold.skip
}

// fence is the counter a fenced acquisition increments, nil for none.
func (r *Request) fence() []byte {
	if r.cold == nil {
		return nil
	}
	return r.cold.fence
}

// load is r's script when it is to be loaded before its first use on a
// master connection, else nil.
func (r *Request) load() *ScriptOp {
	if r.cold == nil {
		return nil
	}
	return r.cold.load
}

// undoExtra is what an UndoZRem removes besides the token, or an
// UndoJSONField's field.
func (r *Request) undoExtra() [][]byte {
	if r.cold == nil {
		return nil
	}
	return r.cold.undoExtra
}

// bigSkip is the masters admitBig found no room on.
func (r *Request) bigSkip() uint64 {
	if r.cold == nil {
		return 0
	}
	return r.cold.bigSkip
}
