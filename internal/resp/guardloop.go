package resp

import "io"

// The event loop's side of the Guard: it reads into the Guard's buffer
// once per readiness event and takes the complete commands as one slice.

// Fill reads once from rd (a non-blocking socket) into the buffer and
// validates what arrived. It returns rd's result: n == 0 with a nil error
// is the end of the stream.
func (g *Guard) Fill(rd io.Reader) (int, error) {
	if g.err != nil || !g.makeRoom() {
		return 0, ErrStopped
	}
	n, err := rd.Read(g.buf[g.end:])
	if n > 0 {
		g.end += n
		g.validate()
	}
	return n, err
}

// Take hands out every complete, validated command not yet handed out
// (NextCommand splits them). The slice is valid until the next Fill.
func (g *Guard) Take() []byte {
	g.resume()
	b := g.buf[g.r:g.ok]
	g.r = g.ok
	return b
}

// Untake gives back the last n bytes that Take handed out: the caller
// stopped before them (a pipeline cut at its output limit), and the next
// Take hands them out again, first. They stay in the buffer, charged to
// the Budget and counted by Unread. No Fill may come between the two.
func (g *Guard) Untake(n int) {
	if n < 0 || n > g.r {
		panic("resp: Untake of more than Take handed out")
	}
	g.r -= n
}

// Broken is the protocol error that ends the stream once every command
// before it was handed out, nil while there is none or some are left.
func (g *Guard) Broken() error {
	if g.r < g.ok {
		return nil
	}
	return g.err
}

// Stopped reports whether the stream has ended at a protocol error,
// whether or not the commands before it were handed out: nothing more is
// read.
func (g *Guard) Stopped() bool { return g.err != nil }

// Unread is the number of bytes read but not yet handed out.
func (g *Guard) Unread() int { return g.end - g.r }

// Keep charges delta bytes (negative: given back) that the connection
// holds besides its input buffer (replies not yet written, a transaction's
// queue, its name) to the Budget, so that they count in what all
// connections hold and in the choice of the one to close. It returns
// false, charging nothing, when the budget is full and this connection
// holds the most: the caller closes it with Budget.Error.
func (g *Guard) Keep(delta int64) bool { return g.Budget.chargeAs(g, delta, true) }

// Free drops the buffer of a closed connection (after Budget.Release).
func (g *Guard) Free() { g.buf = nil }
