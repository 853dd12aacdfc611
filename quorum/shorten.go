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
// that misses it keeps the longer TTL: the safe side.

// Request.shorten values.
const (
	shortenNone   byte = iota
	shortenToken       // compare with r.token (a string's value, a hash's field)
	shortenDigest      // compare with the digest the tokenless extend answered
)

// sendShorten writes the granted extend's TTL on every master. r.mu is
// held; r won, with validity left.
func (r *Request) sendShorten() {
	if r.shorten == shortenNone || r.Key == "" || r.TTL <= 0 {
		return
	}
	left := r.TTL - time.Duration(batching.Now()-r.t0)
	ms := max(left.Milliseconds(), 1)
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
	cmd := AppendEvalSHA(nil, shortenScript.SHA1, [][]byte{[]byte(r.Key)}, [][]byte{strconv.AppendInt(nil, ms, 10), mode, val})
	for i, p := range r.e.pipes {
		if err := p.Submit(batching.Op{Cmd: cmd}); err != nil {
			r.e.cfg.Logger.Debug("shorter TTL not queued; the lock keeps its longer one", "master", r.e.cfg.Masters[i], "err", err)
		}
	}
}
