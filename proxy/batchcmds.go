package proxy

import (
	"bytes"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// Batch scripts: one script over several locks, each of its KEYS a lock of
// its own with its own token (Redisson 4's watchdog renews up to 100 locks
// in one call). The analyzer has checked that the script with n keys does
// what n calls with one key do, one after the other, and answers their
// replies side by side (analyze.Batch). So a call runs as n quorum
// operations, one per key, each decided by the rules of its kind, and the
// client gets their replies side by side.

// evalBatch splits a batch script's call into its one-key calls and submits
// them; a call that is wrong for any key sends nothing.
func (s *Server) evalBatch(c *client, sc *catalog.Script, keys, argv [][]byte, t0 int64) {
	b, n := sc.Batch, len(keys)
	switch {
	case n == 0:
		c.errorf("ERR script %q runs one lock operation per KEYS, and was given no KEYS", sc.Name)
		return
	case n > b.MaxKeys:
		c.errorf("ERR script %q runs one lock operation per KEYS; lockproxy runs at most %d per call (got %d): split the call", sc.Name, b.MaxKeys, n)
		return
	case len(argv) < b.NeedArgs(n):
		c.errorf("ERR script %q takes %d ARGV with %d KEYS (%d for every key, then %d per key), but was given %d", sc.Name, b.NeedArgs(n), n, b.Shared, b.Width, len(argv))
		return
	}
	for i := 1; i < n; i++ {
		for j := 0; j < i; j++ {
			if bytes.Equal(keys[i], keys[j]) {
				// Split, the two parts would be two quorum decisions on
				// one key, not the one script's two steps.
				c.errorf("ERR script %q runs one lock operation per KEYS, and KEYS[%d] repeats KEYS[%d]: lockproxy runs each key once per call", sc.Name, i+1, j+1)
				return
			}
		}
	}
	parts := make([][][]byte, n)
	ttls := make([]time.Duration, n)
	for i := range keys {
		parts[i] = b.Split(argv, n, i, nil)
		if msg := checkScriptArgs(sc, keys[i:i+1], parts[i]); msg != "" {
			c.errorf("%s (the part of KEYS[%d])", msg, i+1)
			return
		}
		ttl, msg := s.scriptTTLs(sc, keys[i:i+1], parts[i])
		if msg != "" {
			c.errorf("%s (the part of KEYS[%d])", msg, i+1)
			return
		}
		ttls[i] = ttl
	}
	start := len(c.slots)
	for i := range keys {
		k := keys[i : i+1]
		s.submit(c, s.cfg.Engine.Script(sc.Op(), k, parts[i], ttls[i], t0), renderReply)
		s.scriptEvent(c, sc, k, parts[i], ttls[i])
	}
	if sc.Kind == quorum.Read {
		c.charge += n * valueReplyCharge // each part may return its value
	}
	sl := slot{kind: renderBatch, resp3: c.resp3, parts: append([]slot(nil), c.slots[start:]...)}
	c.slots = append(c.slots[:start], sl)
}

// renderBatched is a batch call's reply: every part's reply's elements, in
// key order. A part that failed (NOQUORUM, or an error from the masters)
// makes the whole call fail with its error, as the script would on one
// Redis: the client learns nothing it could take for a renewal.
func (s *Server) renderBatched(out []byte, sl *slot) []byte {
	elems := make([]resp.Reply, 0, len(sl.parts))
	var failed []byte
	for i := range sl.parts {
		p := &sl.parts[i]
		if p.ev != nil {
			s.emit(p)
		}
		s.cfg.Metrics.Outcome(p.req)
		rep, err := p.req.Result()
		switch {
		case failed != nil:
		case err != nil:
			failed = resp.AppendError(nil, errorText(err))
		case rep.Type == resp.Error:
			failed = resp.AppendReply(nil, rep, sl.resp3)
		case rep.Type == resp.Array:
			elems = append(elems, rep.Elems...)
		default:
			elems = append(elems, rep)
		}
	}
	if failed != nil {
		return append(out, failed...)
	}
	return resp.AppendReply(out, resp.Reply{Type: resp.Array, Elems: elems}, sl.resp3)
}
