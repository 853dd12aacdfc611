package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
)

// A client connection's bytes travel by one of two transports; everything
// else about the connection (conn.go: the pipeline, back-pressure, replies
// in order, timeouts, shutdown) is the same code on the event loop.
//
//   - fdTransport: a plain TCP socket the loop polls (epoll) and reads and
//     writes itself, without the Go scheduler.
//   - streamTransport: a connection the loop cannot poll (TLS, whose
//     records crypto/tls reads with blocking calls; plain TCP where there is
//     no epoll). One goroutine reads and hands each chunk to the loop, which
//     asks for the next when it wants more; another writes what the loop
//     hands it and tells the loop when it is done. The loop's side looks
//     like a non-blocking socket.
type transport interface {
	// reader is what the guard fills from: it answers syscall.EAGAIN when
	// nothing is there now, (0, nil) at the end of the stream.
	reader() io.Reader
	// write writes what it can of segs, in order, now; syscall.EAGAIN
	// (with the count written) when the rest must wait for the connection
	// to be writable. The segments at even indices are the connection's
	// output buffer, which changes once write returns: a transport that
	// keeps them copies them. Those at odd indices are pub/sub payloads
	// shared with other subscribers (splice.go), read only: a transport
	// keeps them without a copy until they are written.
	write(segs [][]byte) (int, error)
	// want sets what the connection waits for: evloop.Readable, Writable.
	want(events uint32) error
	// inFlight reports whether bytes that write took are not written yet
	// (a stream transport's writer holds them); a Writable event follows
	// once they are.
	inFlight() bool
	// held is how many bytes that write took are not written yet.
	held() int
	// close closes the connection; last, when not nil, is written first
	// if it can be without waiting (a final error).
	close(last []byte)
	// dropWrites gives up on the bytes write took and has not written
	// yet, so that a connection closed for holding too much frees them at
	// once rather than at the write timeout.
	dropWrites()
}

// fdTransport is a plain TCP socket on the loop.
type fdTransport struct {
	loop   *evloop.Loop
	fd     int
	rd     io.Reader // fdReader(fd), boxed once
	events uint32    // what fd is registered for
}

func newFDTransport(loop *evloop.Loop, fd int) *fdTransport {
	return &fdTransport{loop: loop, fd: fd, rd: fdReader(fd)}
}

func (t *fdTransport) reader() io.Reader { return t.rd }
func (t *fdTransport) inFlight() bool    { return false } // in the kernel's buffer
func (t *fdTransport) held() int         { return 0 }

func (t *fdTransport) write(segs [][]byte) (int, error) {
	if len(segs) == 1 {
		return evloop.Write(t.fd, segs[0])
	}
	return evloop.Writev(t.fd, segs)
}

func (t *fdTransport) want(events uint32) error {
	if events == t.events {
		return nil
	}
	if err := t.loop.Modify(t.fd, events); err != nil {
		return err
	}
	t.events = events
	return nil
}

func (t *fdTransport) dropWrites() {} // the kernel holds them; close frees them

func (t *fdTransport) close(last []byte) {
	if last != nil {
		evloop.Write(t.fd, last)
	}
	t.loop.Remove(t.fd)
	syscall.Close(t.fd)
}

// streamTransport is a connection served by a reader and a writer
// goroutine. The loop's fields (chunk, reading, writing) are touched on the
// loop only; the goroutines hand over through posted functions.
type streamTransport struct {
	loop   *evloop.Loop
	conn   net.Conn
	c      *clientConn // told of data and of finished writes, on the loop
	writeT func() time.Time

	readMore  chan struct{} // cap 1: the loop wants the next chunk
	writeNext chan [][]byte // cap 1: a batch for the writer
	final     chan []byte   // cap 1: close, after the batch handed over and this
	quit      chan struct{} // closed with the connection: the reader stops
	closeOnce sync.Once

	// Loop only.
	chunk   []byte // read, not yet taken by the guard
	rerr    error  // the read's error, once chunk is taken
	reading bool   // a read is asked for or under way
	writing bool   // the writer holds a batch
	holding int    // of that many bytes copied (shared payloads are not)
	again   bool   // a read of the left-over chunk is posted
	werr    error  // the writer's error

	dropped atomic.Bool // dropWrites: the writer writes nothing more
}

const streamChunk = 16 << 10

// newStreamTransport serves nc for c; writeBy gives each write's deadline.
func newStreamTransport(loop *evloop.Loop, nc net.Conn, writeBy func() time.Time) *streamTransport {
	return &streamTransport{loop: loop, conn: nc, writeT: writeBy,
		readMore: make(chan struct{}, 1), writeNext: make(chan [][]byte, 1), final: make(chan []byte, 1), quit: make(chan struct{})}
}

// start runs the goroutines; c must be registered on the loop.
func (t *streamTransport) start(c *clientConn) {
	t.c = c
	go t.readLoop()
	go t.writeLoop()
}

func (t *streamTransport) readLoop() {
	buf := make([]byte, streamChunk)
	for {
		select {
		case <-t.readMore:
		case <-t.quit:
			return
		}
		n, err := t.conn.Read(buf)
		got := append([]byte(nil), buf[:n]...)
		if t.loop.Post(func() { t.arrived(got, err) }) != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// arrived takes a chunk on the loop and lets the connection read it.
func (t *streamTransport) arrived(b []byte, err error) {
	t.reading = false
	t.chunk, t.rerr = b, err
	t.c.OnEvent(evloop.Readable)
}

func (t *streamTransport) writeLoop() {
	for {
		select {
		case b := <-t.writeNext:
			err := t.writeAll(b)
			if t.loop.Post(func() { t.written(err) }) != nil {
				t.conn.Close()
				return
			}
		case last := <-t.final:
			// The loop hands a batch only once the last was written, so
			// at most one is left: the replies before the close go out.
			select {
			case b := <-t.writeNext:
				t.writeAll(b)
			default:
			}
			if last != nil {
				t.conn.SetWriteDeadline(time.Now().Add(time.Second))
				t.conn.Write(last)
			}
			t.conn.Close()
			return
		}
	}
}

// writeAll writes the batch's segments in pieces, each with a fresh
// deadline: like a socket on the loop, a client that reads slowly but
// steadily is not cut off by the write timeout, whatever the size of its
// replies; one that reads nothing for that long is.
func (t *streamTransport) writeAll(batch [][]byte) error {
	for _, b := range batch {
		for len(b) > 0 {
			n := min(len(b), writePiece)
			t.conn.SetWriteDeadline(t.writeT())
			if t.dropped.Load() { // after the deadline: dropWrites's comes later or is seen
				return errWritesDropped
			}
			if _, err := t.conn.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
	}
	return nil
}

// writePiece is what a stream's writer writes under one deadline.
const writePiece = 64 << 10

// written is told on the loop that the writer is done with its batch.
func (t *streamTransport) written(err error) {
	t.writing, t.werr = false, err
	if err != nil && !t.c.closed {
		// Closed now: its next write would fail with err anyway, and
		// it may have none.
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.c.f.writeTimedOut(t.c, evloop.Now())
		}
		t.c.close()
		return
	}
	t.c.OnEvent(evloop.Writable)
}

func (t *streamTransport) reader() io.Reader { return (*chunkReader)(t) }

// chunkReader reads the chunk the reader goroutine handed over.
type chunkReader streamTransport

func (r *chunkReader) Read(p []byte) (int, error) {
	t := (*streamTransport)(r)
	if len(t.chunk) > 0 {
		n := copy(p, t.chunk)
		t.chunk = t.chunk[n:]
		return n, nil
	}
	switch {
	case t.rerr == nil:
		return 0, syscall.EAGAIN
	case errors.Is(t.rerr, io.EOF):
		return 0, nil
	}
	return 0, t.rerr
}

// write hands the writer the whole of segs: a copy of the connection's
// own bytes, and the shared payloads as they are (the connection keeps
// them counted until the writer is done: clientConn.lent).
func (t *streamTransport) write(segs [][]byte) (int, error) {
	switch {
	case t.werr != nil:
		return 0, t.werr
	case t.writing:
		return 0, syscall.EAGAIN
	}
	batch := make([][]byte, 0, len(segs))
	n, copied := 0, 0
	for i, b := range segs {
		if len(b) == 0 {
			continue
		}
		if i%2 == 0 {
			b = append([]byte(nil), b...)
			copied += len(b)
		}
		batch = append(batch, b)
		n += len(b)
	}
	if n == 0 {
		return 0, nil
	}
	t.writing, t.holding = true, copied
	t.writeNext <- batch // cap 1, and the writer took the last
	return n, nil
}

func (t *streamTransport) inFlight() bool { return t.writing }
func (t *streamTransport) held() int {
	if t.writing {
		return t.holding
	}
	return 0
}

func (t *streamTransport) want(events uint32) error {
	switch {
	case events&evloop.Readable == 0 || t.reading:
	case len(t.chunk) > 0 || t.rerr != nil:
		// Left over from a chunk the guard could not take then: read it
		// now that the connection wants more (an fd would be readable).
		if !t.again {
			t.again = true
			t.loop.Post(func() { t.again = false; t.c.OnEvent(evloop.Readable) })
		}
	default:
		t.reading = true
		t.readMore <- struct{}{}
	}
	return nil
}

var errWritesDropped = errors.New("replies dropped: the connection is closed")

func (t *streamTransport) dropWrites() {
	t.dropped.Store(true)
	t.conn.SetWriteDeadline(time.Now()) // a write under way fails now
}

func (t *streamTransport) close(last []byte) {
	t.closeOnce.Do(func() {
		close(t.quit)
		if t.c == nil { // never started: nobody else holds the connection
			t.conn.Close()
			return
		}
		t.final <- last // the writer writes what it holds, then closes
	})
}
