package resp

import (
	"io"
	"strings"
	"testing"
)

// Benchmarks of the hot path: parsing the replies masters send for lock
// commands, and validating and splitting what clients send. Both allocate
// nothing (allocs/op 0); compare runs with benchstat:
//
//	go test -run XXX -bench . -count 10 ./internal/resp/

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct{ name, in string }{
		{"ok", "+OK\r\n"},
		{"nil", "$-1\r\n"},
		{"int", ":1\r\n"},
		{"bulk16", "$16\r\n0123456789abcdef\r\n"},
		{"array3", "*3\r\n$5\r\ntoken\r\n:29000\r\n$-1\r\n"},
	} {
		in := []byte(c.in)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, _, err := Parse(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pipeReader returns the same pipeline on every Read, as a client that
// keeps sending it.
type pipeReader struct{ p []byte }

func (r *pipeReader) Read(p []byte) (int, error) { return copy(p, r.p), nil }

// benchPipeline is 16 lock commands as redis-benchmark -P 16 sends them.
func benchPipeline(inline bool) ([]byte, int) {
	var p []byte
	for i := range 16 {
		key := "lock:" + strings.Repeat("k", i)
		if inline {
			p = append(p, "SET "+key+" 0123456789abcdef NX PX 10000\r\n"...)
		} else {
			p = AppendCommandString(p, "SET", key, "0123456789abcdef", "NX", "PX", "10000")
		}
	}
	return p, 16
}

// BenchmarkGuard: one pipeline of 16 SET NX PX per op through the event
// loop's path (Fill, Take, NextCommand) and the blocking path (Read).
func BenchmarkGuard(b *testing.B) {
	l := Limits{MaxBulk: 1 << 20, MaxArgs: 1 << 16, MaxCommand: 8 << 20, ReadAhead: 64 << 10}
	for _, inline := range []bool{false, true} {
		name := map[bool]string{false: "loop", true: "loop-inline"}[inline]
		p, n := benchPipeline(inline)
		b.Run(name, func(b *testing.B) {
			g := Guard{Limits: l}
			rd := &pipeReader{p}
			args := make([][]byte, 0, 8)
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := g.Fill(rd); err != nil {
					b.Fatal(err)
				}
				got := 0
				for data := g.Take(); len(data) > 0; got++ {
					args, data, _ = NextCommand(data, args)
				}
				if got != n {
					b.Fatalf("%d commands, want %d", got, n)
				}
			}
		})
	}
	p, _ := benchPipeline(false)
	b.Run("read", func(b *testing.B) {
		g := Guard{Limits: l}
		rd := &pipeReader{p}
		buf := make([]byte, 4096)
		b.ReportAllocs()
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			for got := 0; got < len(p); {
				n, err := g.Read(rd, buf[:len(p)-got])
				if err != nil && err != io.EOF {
					b.Fatal(err)
				}
				got += n
			}
		}
	})
}

func BenchmarkAppendReply(b *testing.B) {
	for _, c := range []struct {
		name string
		r    Reply
	}{
		{"ok", ReplyOK},
		{"nil", ReplyNil},
		{"int", Reply{Type: Integer, Int: 1}},
		{"bulk16", Reply{Type: Bulk, Str: []byte("0123456789abcdef")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			out := make([]byte, 0, 64)
			b.ReportAllocs()
			for b.Loop() {
				out = AppendReply(out[:0], c.r, true)
			}
		})
	}
}
