package quorum

import (
	"bytes"
	"sync"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Scripts that are not loaded on every master connection (understood ones,
// as opposed to the catalog's and lockproxy's own, which are in the
// pipelines' Init) are loaded on a master before their first use on each of
// its connections: SCRIPT LOAD goes ahead of the EVALSHA on the same ordered
// pipeline, so it always runs first.
type scriptLoads struct {
	mu     sync.Mutex          // protects the fields below
	epoch  []uint64            // per master: connections so far
	loaded []map[string]uint64 // per master: sha1 → the connection it was loaded on
}

// maxLoaded bounds each master's record; past it the record starts over
// (scripts are then loaded once more: harmless).
const maxLoaded = 16 << 10

func (l *scriptLoads) init(n int) {
	l.epoch = make([]uint64, n)
	l.loaded = make([]map[string]uint64, n)
	for i := range l.loaded {
		l.loaded[i] = map[string]uint64{}
	}
}

// reconnected forgets what master i had loaded: a new connection may be to
// a restarted master.
func (l *scriptLoads) reconnected(i int) {
	l.mu.Lock()
	l.epoch[i]++
	l.mu.Unlock()
}

// need reports whether op must be loaded on master i before use, and
// records it as loaded.
func (l *scriptLoads) need(i int, op *ScriptOp) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ep, seen := l.loaded[i][op.SHA1]
	if seen && ep == l.epoch[i] {
		return false
	}
	if len(l.loaded[i]) >= maxLoaded {
		clear(l.loaded[i])
	}
	l.loaded[i][op.SHA1] = l.epoch[i]
	return true
}

// forget records that master i answered NOSCRIPT for sha (its scripts were
// flushed): it is loaded again before its next use.
func (l *scriptLoads) forget(i int, sha string) {
	l.mu.Lock()
	delete(l.loaded[i], sha)
	l.mu.Unlock()
}

// loadFirst queues SCRIPT LOAD of r's script on master i when needed.
func (e *Engine) loadFirst(i int, r *Request) {
	if r.load == nil || r.load.Body == "" || !e.loads.need(i, r.load) {
		return
	}
	if err := e.pipes[i].Submit(batching.Op{Cmd: ScriptLoad(r.load.Body)}); err != nil {
		e.loads.forget(i, r.load.SHA1) // down: its EVALSHA fails too
	}
}

// noScript is a NOSCRIPT reply.
func noScript(rep *resp.Reply) bool {
	return rep.Type == resp.Error && bytes.HasPrefix(rep.Str, []byte("NOSCRIPT"))
}
