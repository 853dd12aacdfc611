package quorum

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Scripts that are not loaded on every master connection (understood ones,
// as opposed to the catalog's and lockproxy's own, which are in the
// pipelines' Init) are loaded on a master before their first use on each of
// its connections: SCRIPT LOAD goes ahead of the EVALSHA on the same ordered
// pipeline, so it always runs first.
//
// Redis never drops a script loaded by SCRIPT LOAD, and clients choose
// which scripts lockproxy understands: one that sent a release with a
// different local name each time grew every master's script cache by
// about 8 KB of RSS per script, without end (docs/hardening.md). So
// lockproxy keeps at most MaxUnderstoodPerMaster of them loaded on a
// master: the one that would go past it flushes that master's scripts
// first (SCRIPT FLUSH ASYNC, then the Init scripts again, in one ordered
// write), and the understood ones still in use are loaded again at their
// next use. The masters are flushed one at a time (staggered), so that a
// request of another lockproxy on the same masters whose EVALSHA meets
// the flush (NOSCRIPT) loses that master's vote only.
type scriptLoads struct {
	mu      sync.Mutex          // protects the fields below
	epoch   []uint64            // per master: connections and flushes so far
	loaded  []map[string]uint64 // per master: sha1 → the epoch it was loaded in
	count   []int               // per master: loaded in the current epoch
	limit   []int               // per master: the count that flushes it
	bound   int                 // MaxUnderstoodPerMaster, or a test's
	flushes atomic.Int64
}

// MaxUnderstoodPerMaster bounds the understood scripts lockproxy keeps
// loaded on one master (fixed). Lock libraries send a handful of scripts;
// a master holds this many in about 8 MB. The Understander keeps 4,096
// verdicts, so a script past this bound may still be known to the proxy:
// it is loaded again before its next use.
const MaxUnderstoodPerMaster = 1024

func (l *scriptLoads) init(n, bound int) {
	l.bound = bound
	l.epoch = make([]uint64, n)
	l.loaded = make([]map[string]uint64, n)
	l.count = make([]int, n)
	l.limit = make([]int, n)
	for i := range l.loaded {
		l.loaded[i] = map[string]uint64{}
		// The first flush of master i comes after (i+1)/n of the bound,
		// the next ones after the whole bound: masters that are loaded
		// the same scripts are flushed bound/n scripts apart.
		l.limit[i] = max(1, bound*(i+1)/n)
	}
}

// reconnected forgets what master i had loaded: a new connection may be to
// a restarted master.
func (l *scriptLoads) reconnected(i int) {
	l.mu.Lock()
	l.newEpoch(i)
	l.mu.Unlock()
}

// newEpoch starts master i's record over. Under l.mu.
func (l *scriptLoads) newEpoch(i int) {
	l.epoch[i]++
	l.count[i] = 0
	// Entries of older epochs count as not loaded; dropping them keeps
	// the record as small as the bound.
	clear(l.loaded[i])
}

// load queues, through submit, SCRIPT LOAD of op on master i when it is
// not loaded there yet, after a flush of the master's scripts (flush: the
// flush and the Init scripts) when it would be one more than the bound,
// then the command that runs it (run). All are queued under l.mu, so that
// no flush of this lockproxy lands between a script's load, or the check
// that it is loaded, and the EVALSHA that needs it.
func (l *scriptLoads) load(i int, op *ScriptOp, flush func() error, submit func([]byte) error, run func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ep, seen := l.loaded[i][op.SHA1]; !seen || ep != l.epoch[i] {
		l.loadLocked(i, op, flush, submit)
	}
	return run()
}

func (l *scriptLoads) loadLocked(i int, op *ScriptOp, flush func() error, submit func([]byte) error) {
	if l.count[i] >= l.limit[i] {
		if err := flush(); err != nil {
			return // down: the EVALSHA fails too, and the reconnection starts over
		}
		l.flushes.Add(1)
		l.newEpoch(i)
		l.limit[i] = l.bound
	}
	if err := submit(ScriptLoad(op.Body)); err != nil {
		return
	}
	l.loaded[i][op.SHA1] = l.epoch[i]
	l.count[i]++
}

// forget records that master i answered NOSCRIPT for sha (its scripts were
// flushed): it is loaded again before its next use.
func (l *scriptLoads) forget(i int, sha string) {
	l.mu.Lock()
	if _, ok := l.loaded[i][sha]; ok {
		delete(l.loaded[i], sha)
		l.count[i]--
	}
	l.mu.Unlock()
}

// scriptFlush is what flushes a master's scripts: asynchronously, so that
// freeing thousands of them does not hold up its other clients.
var scriptFlush = resp.AppendCommandString(nil, "SCRIPT", "FLUSH", "ASYNC")

// ScriptFlushes returns how many times lockproxy flushed a master's
// scripts to keep the understood ones under MaxUnderstoodPerMaster.
func (e *Engine) ScriptFlushes() int64 { return e.loads.flushes.Load() }

// submitLoaded queues op, r's command, on master i, after SCRIPT LOAD of
// r's script when it is not loaded there (load).
func (e *Engine) submitLoaded(i int, r *Request, op batching.Op) error {
	p := e.pipes[i]
	load := r.load()
	if load == nil || load.Body == "" {
		return p.Submit(op)
	}
	return e.loads.load(i, load, func() error {
		if err := p.Submit(batching.Op{Cmd: scriptFlush, C: flushDone{e}}); err != nil {
			return err
		}
		for _, c := range e.init {
			if err := p.Submit(batching.Op{Cmd: c}); err != nil {
				return err
			}
		}
		return nil
	}, func(cmd []byte) error {
		return p.Submit(batching.Op{Cmd: cmd})
	}, func() error { return p.Submit(op) })
}

// flushDone logs a master that refused SCRIPT FLUSH (an ACL without it):
// its understood scripts then go on growing.
type flushDone struct{ e *Engine }

func (f flushDone) Complete(master int, rep resp.Reply, err error) {
	if err == nil && rep.Type == resp.Error {
		f.e.cfg.Logger.Warn("master refused SCRIPT FLUSH ASYNC, which lockproxy sends to keep the scripts clients had it understand under 1024 per master: allow SCRIPT FLUSH to lockproxy's user (ACL), or its script cache grows with each new script",
			"master", f.e.cfg.Masters[master], "reply", string(rep.Str))
	}
}

// noScript is a NOSCRIPT reply.
func noScript(rep *resp.Reply) bool {
	return rep.Type == resp.Error && bytes.HasPrefix(rep.Str, []byte("NOSCRIPT"))
}
