package pubsub

import (
	"bufio"
	"errors"
	"io"
	"strconv"
)

// This file reads what a master sends on a subscribed connection: RESP2
// arrays of bulk strings and integers (subscribe confirmations, messages,
// pong), plus the status and error replies of the handshake. batching's
// parser is built for replies to commands in a pipeline and is unexported;
// when the lead folds lockproxy's RESP code into one package (STYLE.md 10)
// this reader belongs there.

// push is one reply of a master. For an array, elems holds its elements
// (subscribed-mode replies are flat); an element that was an integer has
// its decimal text. An element longer than the reader's limit was skipped
// without being buffered and is marked in oversize.
type push struct {
	typ      byte // '+', '-', ':', '$', '*'
	str      []byte
	elems    [][]byte
	oversize bool
}

// errProtocol means the master sent something that is not RESP2 or not
// what a subscribed connection carries (nested arrays).
var errProtocol = errors.New("pubsub: malformed reply from master")

// maxElems bounds the elements of one array: subscribed-mode replies have
// at most 4.
const maxElems = 16

type reader struct {
	br  *bufio.Reader
	max int // longest bulk string kept; longer ones are skipped
}

// line reads one CRLF-terminated line without its CRLF. A line longer than
// the bufio buffer is a protocol error: no RESP2 header is that long.
func (r *reader) line() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errProtocol
		}
		return nil, err
	}
	if len(b) < 3 || b[len(b)-2] != '\r' {
		return nil, errProtocol
	}
	return b[:len(b)-2], nil
}

// next reads one reply. Strings are copied: the bufio buffer is reused.
func (r *reader) next() (push, error) {
	l, err := r.line()
	if err != nil {
		return push{}, err
	}
	p := push{typ: l[0]}
	switch l[0] {
	case '+', '-', ':':
		p.str = append([]byte(nil), l[1:]...)
		return p, nil
	case '$':
		s, skipped, err := r.bulk(l)
		p.str, p.oversize = s, skipped
		return p, err
	case '*':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil || n < -1 || n > maxElems {
			return push{}, errProtocol
		}
		for range n {
			l, err := r.line()
			if err != nil {
				return push{}, err
			}
			switch l[0] {
			case '$':
				s, skipped, err := r.bulk(l)
				if err != nil {
					return push{}, err
				}
				p.oversize = p.oversize || skipped
				p.elems = append(p.elems, s)
			case ':':
				p.elems = append(p.elems, append([]byte(nil), l[1:]...))
			default:
				return push{}, errProtocol
			}
		}
		return p, nil
	}
	return push{}, errProtocol
}

// bulk reads the body of a bulk string whose header line is l. nil for
// $-1; skipped when it is longer than r.max (its bytes are discarded).
func (r *reader) bulk(l []byte) (s []byte, skipped bool, err error) {
	n, err := strconv.Atoi(string(l[1:]))
	if err != nil || n < -1 {
		return nil, false, errProtocol
	}
	if n == -1 {
		return nil, false, nil
	}
	if n > r.max {
		_, err := io.CopyN(io.Discard, r.br, int64(n)+2)
		return nil, true, err
	}
	s = make([]byte, n+2)
	if _, err := io.ReadFull(r.br, s); err != nil {
		return nil, false, err
	}
	if s[n] != '\r' || s[n+1] != '\n' {
		return nil, false, errProtocol
	}
	return s[:n], false, nil
}
