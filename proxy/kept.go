package proxy

// What a connection holds besides its input buffer, charged to the input
// budget (client_query_buffer_total) with the input, as Redis's
// maxmemory-clients counts a client's query and output buffers together.
// Each part has a bound per connection (outputPauseAt of replies and the
// values of the reads in flight, a transaction's queue, a name), but none
// across connections: 50 connections each pipelining GET of a 1 MiB value
// and reading nothing took lockproxy to 1.1 GB in 6 s, and 9,900 idle
// connections each holding a MULTI of 63 ECHOs of 1 KB to 785 MB, while
// INFO showed 40 MB of client input against a budget of 128 MiB. Charged,
// they count in the budget, and past it the connection holding the most
// is closed with the budget's error, as one holding the most input is.

// keepBufMax is the largest output buffer a connection keeps once its
// replies are written: an idle connection should not hold, nor be charged
// for, the buffer of a burst it read long ago.
const keepBufMax = 64 << 10

// account charges the connection's held memory besides its input buffer
// to the input budget, or closes the connection when the budget is full
// and it holds the most. It runs at the end of every handler (setEvents):
// the memory it measures is what stays held until the next event.
func (lc *clientConn) account() {
	if lc.closed {
		return
	}
	n := int64(cap(lc.out)+cap(lc.c.localBuf)+cap(lc.rest)+lc.t.held()) + lc.c.keptBytes()
	if n == lc.kept {
		return
	}
	if !lc.g.Keep(n - lc.kept) {
		lc.evict()
		return
	}
	lc.kept = n
}

// keptBytes is what the client's state holds for the connection's life or
// until EXEC: its name and library attributes, its transaction's queue and
// watched keys with the values read.
func (c *client) keptBytes() int64 {
	n := len(c.name) + len(c.lib) + len(c.libVer)
	if tx := c.tx; tx != nil {
		n += tx.plainBytes + 24*len(tx.plainQ)
		for _, a := range tx.queued {
			n += len(a)
		}
		for k, w := range tx.watched {
			n += len(k) + len(w.value)
		}
	}
	return int64(n)
}
