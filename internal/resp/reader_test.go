package resp

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReaderSameAsParse: a stream of random replies, read a byte at a
// time, comes out of the Reader as Parse reads it.
func TestReaderSameAsParse(t *testing.T) {
	rng := newRand(t)
	var stream []byte
	var want []Reply
	for range 500 {
		r := randReply(rng, 0, false)
		stream = AppendReply(stream, r, false)
		want = append(want, r)
	}
	rd := NewReader(iotest.OneByteReader(bytes.NewReader(stream)), 64)
	for i, w := range want {
		got, err := rd.Next()
		if err != nil || !got.Equal(w) || rd.Skipped() {
			t.Fatalf("reply %d: %v (%v, skipped %v), want %v", i, got, err, rd.Skipped(), w)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("after the last reply: %v", err)
	}
}

// TestReaderLimits: what a subscribed connection allows (pubsub): long
// payloads skipped without being buffered, flat arrays of a few elements.
func TestReaderLimits(t *testing.T) {
	long := strings.Repeat("x", 100)
	in := "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$100\r\n" + long + "\r\n" +
		"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n" +
		"$100\r\n" + long + "\r\n" +
		"$-1\r\n*-1\r\n*1\r\n*0\r\n"
	rd := NewReader(strings.NewReader(in), 64)
	rd.MaxBulk, rd.MaxElems, rd.MaxDepth = 10, 4, 1
	for i, want := range []struct {
		r       Reply
		skipped bool
	}{
		{Reply{Type: Array, Elems: []Reply{{Type: Bulk, Str: []byte("message")}, {Type: Bulk, Str: []byte("ch")}, {Type: Bulk}}}, true},
		{Reply{Type: Array, Elems: []Reply{{Type: Bulk, Str: []byte("subscribe")}, {Type: Bulk, Str: []byte("ch")}, {Type: Integer, Int: 1}}}, false},
		{Reply{Type: Bulk}, true},
		{ReplyNil, false},
		{ReplyNil, false},
		{Reply{Type: Array, Elems: []Reply{{Type: Array, Elems: []Reply{}}}}, false},
	} {
		got, err := rd.Next()
		if err != nil || !got.Equal(want.r) || rd.Skipped() != want.skipped {
			t.Fatalf("reply %d: %v (%v, skipped %v), want %v (skipped %v)", i, got, err, rd.Skipped(), want.r, want.skipped)
		}
	}
	for _, bad := range []string{
		"*5\r\n",                               // over MaxElems
		"*1\r\n*1\r\n:1\r\n",                   // nested past MaxDepth
		":" + strings.Repeat("1", 70) + "\r\n", // a line longer than the buffer
		"$1099511627777\r\n",                   // over any sane length
		"$-2\r\n", "*-2\r\n", ":x\r\n", "?\r\n", "+\n", "$3\r\nabcd\r\n",
	} {
		rd := NewReader(strings.NewReader(bad), 64)
		rd.MaxBulk, rd.MaxElems, rd.MaxDepth = 10, 4, 1
		if r, err := rd.Next(); err != ErrMalformed {
			t.Errorf("%q: %v, %v; want malformed", bad, r, err)
		}
	}
	rd = NewReader(strings.NewReader("$5\r\nab"), 64)
	if _, err := rd.Next(); err != io.ErrUnexpectedEOF {
		t.Errorf("a cut bulk string: %v", err)
	}
}
