package proxy

import (
	"runtime/debug"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// How a connection ends when something goes wrong: a broken stream, the
// input budget, a panic while serving it.

// protocolError answers a broken stream after the replies before it; then
// the connection closes: it cannot be trusted past the error.
func (lc *clientConn) protocolError(err error) {
	pe := err.(*resp.ProtocolError)
	if !pe.OverBudget {
		lc.f.s.protoErr.Add(1)
	}
	lc.f.s.cfg.Logger.Debug("client stream ended by lockproxy; closing its connection", "client", lc.c.addr, "err", pe.Msg)
	lc.out = resp.AppendError(lc.out, pe.Reply())
	lc.closeAfter = true
}

// evict closes a connection that the input budget chose (it holds the
// most while all clients together hold client_query_buffer_total): at
// once, so that its memory is freed now, telling it why if no reply of
// its own is pending.
func (lc *clientConn) evict() {
	if lc.closed {
		return
	}
	err := lc.f.s.budget.Error(lc.g.Held())
	lc.f.s.cfg.Logger.Debug("client stream ended by lockproxy; closing its connection", "client", lc.c.addr, "err", err.Msg)
	var last []byte
	if !lc.busy && lc.outOff == len(lc.out) && !lc.t.inFlight() {
		last = resp.AppendError(nil, err.Reply())
	}
	lc.t.dropWrites() // what a TLS writer holds is freed now, not at the write timeout
	lc.closeWith(last)
}

// recoverPanic keeps one bad request from stopping the loop: the client is
// told and its connection closed, as on redcon's connections.
func (lc *clientConn) recoverPanic() {
	p := recover()
	if p == nil {
		return
	}
	lc.f.s.cfg.Logger.Error("panic serving a client; its connection is closed, others are unaffected",
		"client", lc.c.addr, "panic", p, "stack", string(debug.Stack()))
	if lc.entered && !lc.busy && lc.c.w.Pending() > 0 {
		// Requests already submitted: count the pipeline until they are
		// decided, then drop it (Run).
		lc.busy = true
		lc.f.waiting[lc] = struct{}{}
		lc.f.alarm.At(evloop.Now() + int64(time.Second))
	}
	lc.closeWith([]byte("-ERR internal error in lockproxy; the connection is closed\r\n"))
}
