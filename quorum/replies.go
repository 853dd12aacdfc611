package quorum

import "github.com/lockproxy/lockproxy/internal/resp"

// The masters' replies to a request. Most replies are one of a few fixed
// ones (+OK and nil for SET NX, :1 and :0 for the release and extend
// scripts): for those, Request.rk records which, and the reply is not
// copied into the request. Copying every 64-byte Reply into an array of
// its own made each master's reply touch one more cache line of its
// request, and the array made every request larger to allocate, zero and
// keep in cache. Any other reply goes to r.ext, allocated on first use.
// All of it under r.mu.

// Request.rk bits: rkYes, and the reply's kind in the bits above it.
const (
	rkYes   uint8 = 1 << 0 // AggVote: the reply is a yes (by Rule, and the check's)
	rkShift       = 1

	rkExt  uint8 = 0 // no reply, or one kept in r.ext.replies
	rkOK   uint8 = 1 // +OK
	rkNil  uint8 = 2 // nil
	rkZero uint8 = 3 // :0
	rkOne  uint8 = 4 // :1
)

// reqExt is what a request rarely needs per master.
type reqExt struct {
	replies [MaxMasters]resp.Reply // the replies rk does not hold
	errs    [MaxMasters]error      // why a master's vote did not count
}

// extOf returns r.ext, allocating it on first use and marking it to be
// cleared when r is recycled. r.mu is held.
func (r *Request) extOf() *reqExt {
	if r.ext == nil {
		r.ext = new(reqExt)
	}
	r.extDirty = true
	return r.ext
}

// AbsentYesSupported reports whether rep can be a ScriptOp's AbsentYes or
// DeletedYes: one of the common replies, which a request records in a byte.
func AbsentYesSupported(rep *resp.Reply) bool { return rkOf(rep) != rkExt }

// rkOf is the kind rk records for rep, rkExt when rep is none of the
// common replies. Only replies equal field for field to what the parser
// returns for them qualify, so replyAt gives back exactly rep.
func rkOf(rep *resp.Reply) uint8 {
	if rep.Elems != nil {
		return rkExt
	}
	switch rep.Type {
	case resp.Status:
		if rep.Int == 0 && string(rep.Str) == "OK" {
			return rkOK
		}
	case resp.Nil:
		if rep.Int == 0 && rep.Str == nil {
			return rkNil
		}
	case resp.Integer:
		if rep.Str == nil {
			switch rep.Int {
			case 0:
				return rkZero
			case 1:
				return rkOne
			}
		}
	}
	return rkExt
}

// putReply records master's reply rep, of kind k (rkOf(rep)), and
// whether it is a yes. r.mu is held.
func (r *Request) putReply(master int, rep *resp.Reply, k uint8, yes bool) {
	if k == rkExt {
		r.extOf().replies[master] = *rep
	}
	v := k << rkShift
	if yes {
		v |= rkYes
	}
	r.rk[master] = v
}

// Request.fast bits, set by dispatch (prepareVote) from the rule, chk and
// reent of the request it sends, so that a reply reads none of them (they
// are on another cache line than the vote's): a common reply's vote is
// read off these bits, and chk and reent are known to be nil. 0: not
// prepared (a request completed without dispatch, as in tests): replies
// read the fields themselves.
const (
	fastReady   uint8 = 1 << 0
	fastSpecial uint8 = 1 << 1 // chk or reent is set
	// Bit fastYesShift+k: a reply of kind k (rkOK to rkOne) is a yes by
	// rule (AggVote only).
	fastYesShift = 2
)

// prepareVote sets r.fast from r's rule, nkeys, chk and reent. dispatch
// calls it before sending, under r.mu.
func (r *Request) prepareVote() {
	f := fastReady
	switch {
	case r.chk != nil || r.reent != nil:
		f |= fastSpecial
	case r.agg == AggVote && r.rule != nil:
		for k := rkOK; k <= rkOne; k++ {
			if rep := commonReply(k); r.rule.IsYes(&rep, r.nkeys) {
				f |= 1 << (fastYesShift + k)
			}
		}
	}
	r.fast = f
}

// mayBeSpecial reports whether r's chk or reent may be set: false only
// when dispatch found both nil. r.mu is held.
func (r *Request) mayBeSpecial() bool {
	return r.fast&fastReady == 0 || r.fast&fastSpecial != 0
}

// voteOf reports whether master's reply rep, of kind k (rkOf(rep)), is a
// yes vote: isYes, without reading the rule for a common reply of a
// prepared request that has no check or counts. r.mu is held.
func (r *Request) voteOf(master int, rep *resp.Reply, k uint8) bool {
	if r.agg != AggVote {
		return false
	}
	if k != rkExt && !r.mayBeSpecial() {
		return r.fast&(1<<(fastYesShift+k)) != 0
	}
	return r.isYes(master, rep)
}

// commonReply is the reply of kind k, one of rkOK to rkOne.
func commonReply(k uint8) resp.Reply {
	switch k {
	case rkOK:
		return resp.ReplyOK
	case rkNil:
		return resp.ReplyNil
	case rkZero:
		return resp.Reply{Type: resp.Integer}
	case rkOne:
		return resp.Reply{Type: resp.Integer, Int: 1}
	}
	return resp.Reply{}
}

// replyAt is master's reply (the zero Reply when it gave none). r.mu is
// held.
func (r *Request) replyAt(master int) resp.Reply {
	if k := r.rk[master] >> rkShift; k != rkExt {
		return commonReply(k)
	}
	if r.ext == nil {
		return resp.Reply{}
	}
	return r.ext.replies[master]
}

// yesAt reports whether master's reply is a yes. r.mu is held.
func (r *Request) yesAt(master int) bool { return r.rk[master]&rkYes != 0 }

// errAt is why master's vote did not count, nil if it did or is still to
// come. r.mu is held.
func (r *Request) errAt(master int) error {
	if r.ext == nil {
		return nil
	}
	return r.ext.errs[master]
}
