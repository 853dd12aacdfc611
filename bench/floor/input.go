package floor

import "github.com/lockproxy/lockproxy/internal/evloop"

// inbuf is a connection's input: b[start:end] is read and not yet used.
type inbuf struct {
	b          []byte
	start, end int
}

// read reads once from fd after making room (moving the unused bytes to
// the front, or doubling the buffer when it is full of them).
func (in *inbuf) read(fd int) (int, error) {
	if in.end == len(in.b) {
		if in.start > 0 {
			in.end = copy(in.b, in.b[in.start:in.end])
			in.start = 0
		} else {
			in.b = append(in.b, make([]byte, len(in.b))...)
		}
	}
	n, err := evloop.Read(fd, in.b[in.end:])
	if err == nil {
		in.end += n
	}
	return n, err
}

func (in *inbuf) unread() []byte { return in.b[in.start:in.end] }

// consumed marks n unread bytes used.
func (in *inbuf) consumed(n int) {
	if in.start += n; in.start == in.end {
		in.start, in.end = 0, 0
	}
}

// frame returns the length of the complete RESP array command at the start
// of b, 0 when it is incomplete, -1 when b does not start with one.
func frame(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if b[0] != '*' {
		return -1
	}
	n, i, ok := number(b, 1)
	if !ok {
		return 0
	}
	for ; n > 0; n-- {
		if i >= len(b) {
			return 0
		}
		if b[i] != '$' {
			return -1
		}
		l, j, ok := number(b, i+1)
		if !ok {
			return 0
		}
		i = j + l + 2
		if i > len(b) {
			return 0
		}
	}
	return i
}

// number parses the decimal at b[i:] up to its CRLF; next is past the CRLF.
func number(b []byte, i int) (n, next int, ok bool) {
	for ; i < len(b) && b[i] != '\r'; i++ {
		n = n*10 + int(b[i]-'0')
	}
	if i+1 >= len(b) {
		return 0, 0, false
	}
	return n, i + 2, true
}
