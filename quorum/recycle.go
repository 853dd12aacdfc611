package quorum

import "sync"

// Request lifetime: references, and recycling through a pool once the
// submitter, every master and the engine are done with a request.

// requestPool recycles Requests: one is allocated per client command, and
// at hundreds of thousands a second their allocation and scanning were a
// visible share of lockproxy's CPU (docs/bench/README.md). A LIFO free list
// of its own measured no better (docs/bench/proxy-cpu.md).
var requestPool = sync.Pool{New: func() any { return new(Request) }}

// NewRequest returns a zeroed Request that goes back to a pool once its
// submitter has called Release and every master has answered or failed.
// A Request made with &Request{} works the same and is left to the GC.
func NewRequest() *Request {
	r := requestPool.Get().(*Request)
	r.pooled = true
	return r
}

// Release tells the engine that the submitter has read r's outcome and
// holds no reference to r any more; r must be decided. r is recycled once
// nothing else refers to it: a master that has not answered yet (its reply
// still arrives to r), or the engine handing r's key to the next request.
// Requests never submitted, or whose submitter went away before the
// outcome, are simply not released.
func (r *Request) Release() { r.unref() }

// CmdBuffer returns an empty slice with room for n bytes, for Cmd: a pooled
// Request keeps it for the next command once recycled, when nothing (a
// master's queue, the key table) refers to it any more.
func (r *Request) CmdBuffer(n int) []byte {
	if cap(r.buf) < n {
		r.buf = make([]byte, 0, max(n, 64))
	}
	return r.buf[:0]
}

// maxKeptBuffer bounds the command buffer a recycled Request keeps.
const maxKeptBuffer = 4 << 10

// OneUndoKey returns UndoKeys for a single key without allocating.
func (r *Request) OneUndoKey(k []byte) [][]byte {
	r.undoKey[0] = k
	return r.undoKey[:]
}

func (r *Request) ref() { r.refs.Add(1) }

func (r *Request) unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	parent := r.parent()
	if r.pooled {
		if onRecycle != nil {
			onRecycle(r)
		}
		buf := r.buf[:0]
		if cap(buf) > maxKeptBuffer {
			buf = nil
		}
		ext, cold := r.ext, r.cold
		if r.extDirty {
			*ext = reqExt{}
		}
		if r.coldDirty {
			*cold = reqCold{}
		}
		*r = Request{}
		r.buf, r.ext, r.cold = buf, ext, cold
		requestPool.Put(r)
	}
	if parent != nil {
		parent.unref() // a retry aliases its parent's command: kept until now
	}
}

// onRecycle, when set by a test, sees each Request going back to the pool.
var onRecycle func(*Request)
