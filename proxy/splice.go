package proxy

import "github.com/lockproxy/lockproxy/internal/evloop"

// A large pub/sub payload is written to each subscriber from the one slice
// the hub hands all of them, not copied into each one's output: copied,
// a broadcast of 1 MB messages to 200 subscribers that read held 200 MB of
// brief copies, each charged to its connection (kept.go), and at the
// default client_query_buffer_total the budget closed the publisher and
// dozens of subscribers at the second message. Spliced, the connection's
// output (lc.out) holds the message's frame around the payload, and the
// payload's place in it; the payload stays counted once among the shared
// payloads (sharedpush.go) until this subscriber has written it (over TLS:
// until its writer is done with it) or is closed.
//
// A payload under spliceMin is copied, as every reply is: a lock's
// release message is a few bytes, for which a splice would cost more than
// the copy (a writev entry, and over TLS a record of its own and the frame
// around it in two more), while what small messages' copies hold is
// bounded per connection (pushChunk framed at a time while it is idle,
// the pubsub limits), and charged to it.

// spliceMin is the smallest payload written from the shared slice.
const spliceMin = 16 << 10

// splice is a shared payload's place in lc.out: it goes before lc.out[at].
// Every splice is followed by its frame's "\r\n" in lc.out, so lc.out is
// written whole (outOff == len(out)) only once every payload before its
// end is.
type splice struct {
	at int
	p  []byte // the hub's payload, whole: read only
}

// appendPayload appends a message's payload, whose bulk header lc.out
// ends with, and the frame's end: spliced when it is large.
func (lc *clientConn) appendPayload(p []byte) {
	if len(p) < spliceMin {
		lc.out = append(lc.out, p...)
		lc.out = append(lc.out, '\r', '\n')
		return
	}
	lc.f.shared.hold(p)
	lc.splices = append(lc.splices, splice{at: len(lc.out), p: p})
	lc.splicedSize += int64(len(p))
	lc.out = append(lc.out, '\r', '\n')
}

// unwritten is what the connection's output holds not yet written, its
// spliced payloads included.
func (lc *clientConn) unwritten() int64 {
	return int64(len(lc.out)-lc.outOff) + lc.splicedSize
}

// segments is what flush hands the transport: lc.out's unwritten bytes
// and the spliced payloads between them, in order, own bytes at even
// indices and shared payloads at odd ones (transport.write); at most
// about evloop.WritevMax of them.
func (lc *clientConn) segments() [][]byte {
	segs := lc.segs[:0]
	off, pOff := lc.outOff, lc.spliceOff
	k := 0
	for ; k < len(lc.splices) && len(segs) < writeSegsMax-2; k++ {
		sp := &lc.splices[k]
		segs = append(segs, lc.out[off:sp.at], sp.p[pOff:])
		off, pOff = sp.at, 0
	}
	end := len(lc.out)
	if k < len(lc.splices) {
		end = lc.splices[k].at
	}
	lc.segs = append(segs, lc.out[off:end])
	return lc.segs
}

// writeSegsMax bounds the segments of one write: a writev takes that many
// (an odd number: segments ends with lc.out's bytes).
const writeSegsMax = evloop.WritevMax - 1

// wrote moves the output on by n bytes written: through lc.out and the
// payloads spliced in it. A payload written whole is given back, or, when
// the transport holds it until its writer is done (lent), kept counted
// until then (returnLent).
func (lc *clientConn) wrote(n int, lent bool) {
	for n > 0 {
		if len(lc.splices) > 0 && lc.outOff == lc.splices[0].at {
			sp := &lc.splices[0]
			k := min(n, len(sp.p)-lc.spliceOff)
			lc.spliceOff += k
			lc.splicedSize -= int64(k)
			n -= k
			if lc.spliceOff == len(sp.p) {
				if lent {
					lc.lent = append(lc.lent, sp.p)
				} else {
					lc.f.shared.drop(sp.p)
				}
				lc.splices[0] = splice{}
				lc.splices, lc.spliceOff = lc.splices[1:], 0
			}
			continue
		}
		end := len(lc.out)
		if len(lc.splices) > 0 {
			end = lc.splices[0].at
		}
		k := min(n, end-lc.outOff)
		if k == 0 {
			break // more than it was given: nothing is left to move on
		}
		lc.outOff += k
		n -= k
	}
	if len(lc.splices) == 0 {
		lc.splices = lc.splices[:0:0] // not a burst's array, nor a payload in it
	}
}

// returnLent gives back the payloads the transport's writer held, once it
// is done with them.
func (lc *clientConn) returnLent() {
	if len(lc.lent) == 0 || (lc.t.inFlight() && !lc.closed) {
		return
	}
	for i, p := range lc.lent {
		lc.f.shared.drop(p)
		lc.lent[i] = nil
	}
	lc.lent = lc.lent[:0]
}

// dropSplices gives back every payload the connection's output holds (it
// closes), those its writer still holds included: a closed connection's
// charges are all given back at once (Budget.Release), and its writer
// ends within the write timeout.
func (lc *clientConn) dropSplices() {
	for i := range lc.splices {
		lc.f.shared.drop(lc.splices[i].p)
	}
	lc.splices, lc.spliceOff, lc.splicedSize = nil, 0, 0
	lc.returnLent()
	lc.lent = nil
}
