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

// putReply records master's reply and whether it is a yes. r.mu is held.
func (r *Request) putReply(master int, rep *resp.Reply, yes bool) {
	k := rkOf(rep)
	if k == rkExt {
		r.extOf().replies[master] = *rep
	}
	v := k << rkShift
	if yes {
		v |= rkYes
	}
	r.rk[master] = v
}

// replyAt is master's reply (the zero Reply when it gave none). r.mu is
// held.
func (r *Request) replyAt(master int) resp.Reply {
	switch r.rk[master] >> rkShift {
	case rkOK:
		return resp.ReplyOK
	case rkNil:
		return resp.ReplyNil
	case rkZero:
		return resp.Reply{Type: resp.Integer}
	case rkOne:
		return resp.Reply{Type: resp.Integer, Int: 1}
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
