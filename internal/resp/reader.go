package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Reader reads RESP2 replies one at a time from a stream: a connection the
// master writes to unprompted (subscribed mode, where messages arrive
// between the replies), or a client that waits for each reply in turn.
// Unlike Parse it needs no buffer of its own that holds a whole reply: a
// bulk string longer than MaxBulk is read past without being kept.
type Reader struct {
	// MaxBulk bounds a bulk string kept; a longer one is discarded as it
	// arrives, its Reply has a nil Str and Skipped reports it. 0: no
	// bound.
	MaxBulk int
	// MaxElems bounds the elements of one array (ErrMalformed past it);
	// 0: no bound. Elements are allocated as they arrive, never from the
	// declared count.
	MaxElems int
	// MaxDepth bounds nested arrays: 1 allows arrays of scalars only
	// (subscribed mode), 2 arrays of those, and so on; 0 means the
	// package's MaxDepth.
	MaxDepth int

	br      *bufio.Reader
	skipped bool
}

// NewReader reads from rd through a buffer of size bytes, which bounds a
// header line: a longer one is ErrMalformed.
func NewReader(rd io.Reader, size int) *Reader {
	return &Reader{br: bufio.NewReaderSize(rd, size)}
}

// Next reads one reply. Its strings are copied: the buffer is reused. A
// failed read is returned as it is (io.EOF, a timeout); bytes that are not
// RESP2 are ErrMalformed, after which the stream cannot be trusted.
func (r *Reader) Next() (Reply, error) {
	r.skipped = false
	depth := r.MaxDepth
	if depth <= 0 {
		depth = MaxDepth
	}
	return r.next(depth)
}

// Skipped reports whether the last reply Next returned had a bulk string
// longer than MaxBulk, read past (its Str is nil).
func (r *Reader) Skipped() bool { return r.skipped }

func (r *Reader) next(depth int) (Reply, error) {
	l, err := r.line()
	if err != nil {
		return Reply{}, err
	}
	switch l[0] {
	case Status, Error:
		return Reply{Type: l[0], Str: append([]byte(nil), l[1:]...)}, nil
	case Integer:
		v, ok := parseInt(l[1:])
		if !ok {
			return Reply{}, ErrMalformed
		}
		return Reply{Type: Integer, Int: v}, nil
	case Bulk:
		return r.bulk(l[1:])
	case Array:
		n, ok := parseInt(l[1:])
		switch {
		case !ok || n < -1 || (r.MaxElems > 0 && n > int64(r.MaxElems)):
			return Reply{}, ErrMalformed
		case n == -1:
			return ReplyNil, nil
		case n > 0 && depth == 0:
			return Reply{}, ErrMalformed
		}
		elems := make([]Reply, 0, min(n, 16))
		for ; n > 0; n-- {
			e, err := r.next(depth - 1)
			if err != nil {
				return Reply{}, err
			}
			elems = append(elems, e)
		}
		return Reply{Type: Array, Elems: elems}, nil
	}
	return Reply{}, ErrMalformed
}

// line reads one CRLF-terminated line without its CRLF. A line longer
// than the buffer is malformed: no RESP2 header is that long.
func (r *Reader) line() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, ErrMalformed
		}
		return nil, err
	}
	if len(b) < 3 || b[len(b)-2] != '\r' {
		return nil, ErrMalformed
	}
	return b[:len(b)-2], nil
}

// bulk reads the body of a bulk string of length l.
func (r *Reader) bulk(l []byte) (Reply, error) {
	n, ok := parseInt(l)
	switch {
	case !ok || n < -1 || n > 1<<40:
		return Reply{}, ErrMalformed
	case n == -1:
		return ReplyNil, nil
	case r.MaxBulk > 0 && n > int64(r.MaxBulk):
		r.skipped = true
		if _, err := r.br.Discard(int(n) + 2); err != nil {
			return Reply{}, err
		}
		return Reply{Type: Bulk}, nil
	}
	// The memory grows with the bytes that arrive, not with the length
	// declared.
	var buf bytes.Buffer
	buf.Grow(int(min(n+2, 64<<10)))
	if _, err := io.CopyN(&buf, r.br, n+2); err != nil {
		return Reply{}, noEOF(err)
	}
	s := buf.Bytes()
	if s[n] != '\r' || s[n+1] != '\n' {
		return Reply{}, ErrMalformed
	}
	return Reply{Type: Bulk, Str: s[:n:n]}, nil
}

// noEOF turns the end of the stream inside a reply into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
