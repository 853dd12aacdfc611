package quorum

import (
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// An extend never lowers a lock's TTL on a master (extendScript,
// CappedExtendScript, and WrapNoShorten around every catalogued or
// understood extend): an extend that fails (NOQUORUM, no validity left),
// or that a master applies after the decision, is no release, and its
// holder keeps its earlier validity; with the shorter TTL written on the
// masters anyway, another client was granted the lock inside it (review,
// helper-55). So the shorter TTL a client asked for is written only once
// its extend is granted: then the holder's validity is the extend's, and
// shortenScript sets every master's copy of the holder's lock to the TTL
// the extend asked for, less the time since the command arrived. A master
// that misses it keeps the longer TTL: the safe side. The shorten is a
// compare-and-set on the expiry the extend left on each master (its
// PEXPIRETIME, WrapCheck): sent without waiting, it may land after a later
// renewal of the lock through another lockproxy, which it must not cut.

// Request.shorten values.
const (
	shortenNone   byte = iota
	shortenToken       // compare with r.token (a string's value, a hash's field)
	shortenDigest      // compare with the digest the tokenless extend answered
)

// sendShorten writes the granted extend's TTL on every master that has
// answered the extend; a master that answers later gets it then
// (shortenLate). r.mu is held; r won, with validity left.
func (r *Request) sendShorten() {
	if r.shorten == shortenNone || r.Key == "" || r.TTL <= 0 || r.chk == nil {
		return
	}
	s, h := r.e.slots.ofRequest(r, []byte(r.Key))
	s.mu.Lock()
	r.chk.gen = *r.e.slots.gen(h) // r's own dispatch counted: the key has not passed on yet
	s.mu.Unlock()
	r.shortenOn = true
	for i := range r.e.pipes {
		r.shortenOne(i)
	}
}

// shortenLate is sendShorten for master i, whose reply to a granted
// extend came after the grant, and only while no write of the key (or of
// another key of its slot) went out since: one may be queued on that
// master ahead of the shorter TTL, keep the expiry this extend left
// there (an extend never lowers a TTL) and be granted counting that copy,
// which the shorter TTL would then cut. r.mu is held.
func (r *Request) shortenLate(i int) {
	if !r.shortenOn {
		return
	}
	s, h := r.e.slots.ofRequest(r, []byte(r.Key))
	s.mu.Lock()
	moved := *r.e.slots.gen(h) != r.chk.gen
	s.mu.Unlock()
	if !moved {
		r.shortenOne(i)
	}
}

// shortenOne sends master i the shorter TTL, as a compare-and-set on the
// expiry its copy had after the extend: only where the extend answered
// with one. A master that did not keeps the longer TTL, the safe side.
// r.mu is held.
func (r *Request) shortenOne(i int) {
	c := r.chk
	if c.seen&(1<<i) == 0 || c.at[i] <= 0 || c.shortened&(1<<i) != 0 {
		return
	}
	mode, val := []byte("t"), r.token
	if r.shorten == shortenDigest {
		rep := r.reply
		if rep.Type != resp.Array || len(rep.Elems) != 2 || rep.Elems[1].Type != resp.Bulk {
			return
		}
		mode, val = []byte("d"), rep.Elems[1].Str
	}
	if val == nil {
		return
	}
	c.shortened |= 1 << i
	left := r.TTL - time.Duration(batching.Now()-r.t0)
	ms := strconv.AppendInt(nil, max(left.Milliseconds(), 1), 10)
	cmd := AppendEvalSHA(nil, shortenScript.SHA1, [][]byte{[]byte(r.Key)}, [][]byte{ms, mode, val, strconv.AppendInt(nil, c.at[i], 10)})
	if err := r.e.pipes[i].Submit(batching.Op{Cmd: cmd}); err != nil {
		r.e.cfg.Logger.Debug("shorter TTL not queued; the lock keeps its longer one", "master", r.e.cfg.Masters[i], "err", err)
	}
}
