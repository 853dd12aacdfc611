//go:build linux

package evloop

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestWritevPartialAndBounded: Writev writes its buffers in order, skips
// empty ones, takes at most WritevMax non-empty ones per call, and on a
// full socket writes part of them (a count that ends inside a buffer) or
// answers EAGAIN; resuming from the count, as a caller does, the reader
// gets every byte once, in order.
func TestWritevPartialAndBounded(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	// A small send buffer: the writes fill it within a buffer or two.
	if err := syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}

	// 3*WritevMax buffers of sizes from 0 (skipped) to several KiB, each
	// byte telling which buffer and where in it it is.
	var bufs [][]byte
	var want []byte
	for i := 0; i < 3*WritevMax; i++ {
		n := (i * 997) % 5003
		if i%7 == 0 {
			n = 0
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i + j/251)
		}
		bufs = append(bufs, b)
		want = append(want, b...)
	}

	var got []byte
	rd := make([]byte, 1500) // the reader drains less than the writer sends
	rest := bufs
	partial, again := 0, 0
	for len(rest) > 0 {
		left := 0
		for _, b := range rest {
			left += len(b)
		}
		n, err := Writev(fds[0], rest)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			again++
			if n != 0 {
				t.Fatalf("EAGAIN with %d bytes written", n)
			}
		case err != nil:
			t.Fatal(err)
		case n == 0 && left > 0:
			t.Fatal("Writev wrote nothing and answered no error")
		}
		// Move on by n, as a caller does: mid-buffer too.
		for n > 0 {
			k := min(n, len(rest[0]))
			if k < len(rest[0]) {
				partial++
			}
			rest[0] = rest[0][k:]
			n -= k
			if len(rest[0]) == 0 {
				rest = rest[1:]
			}
		}
		for len(rest) > 0 && len(rest[0]) == 0 {
			rest = rest[1:]
		}
		if r, err := syscall.Read(fds[1], rd); err == nil {
			got = append(got, rd[:r]...)
		}
	}
	for {
		r, err := syscall.Read(fds[1], rd)
		if err != nil || r == 0 {
			break
		}
		got = append(got, rd[:r]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	if partial == 0 || again == 0 {
		t.Fatalf("the socket never cut a buffer (%d) or refused a write (%d): the test did not test the partial writes", partial, again)
	}
	if n, err := Writev(fds[0], [][]byte{nil, {}}); n != 0 || err != nil {
		t.Fatalf("Writev of empty buffers: %d, %v; want 0, nil", n, err)
	}

	// Past WritevMax non-empty buffers (IOV_MAX is 1024, more fail with
	// EINVAL), a call writes the first WritevMax, whole, and no more.
	many := make([][]byte, 0, 2000)
	for i := 0; i < 2000; i++ {
		many = append(many, []byte{byte(i)}, nil)
	}
	n, err := Writev(fds[0], many)
	if err != nil || n != WritevMax {
		t.Fatalf("Writev of 2000 one-byte buffers (and as many empty ones): %d, %v; want %d, nil", n, err, WritevMax)
	}
	got = got[:0]
	for len(got) < n {
		r, err := syscall.Read(fds[1], rd)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rd[:r]...)
	}
	for i, b := range got {
		if b != byte(i) {
			t.Fatalf("byte %d is %d, want %d: buffers out of order", i, b, byte(i))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
