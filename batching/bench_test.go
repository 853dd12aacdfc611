package batching

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// waitGroupCompleter completes one op of a benchmark.
type wgCompleter struct{ wg *sync.WaitGroup }

func (c wgCompleter) Complete(int, resp.Reply, error) { c.wg.Done() }

// BenchmarkPipeline: many goroutines submit SET to one real master through
// one Pipeline and wait for their reply, as connections do, with a writer
// and reader goroutine (goroutines) and on the event loop (loop). Reports
// the mean batch size (ops per write): the point of the package.
func BenchmarkPipeline(b *testing.B) {
	b.Run("goroutines", func(b *testing.B) { benchmarkPipeline(b, nil) })
	b.Run("loop", func(b *testing.B) {
		l, err := evloop.New(quiet())
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		benchmarkPipeline(b, l)
	})
}

func benchmarkPipeline(b *testing.B, l *evloop.Loop) {
	m := startForBench(b)
	var writes, ops atomic.Int64
	p := New(Options{Addr: m, Logger: quiet(), Loop: l, OnBatch: func(_, n int) { writes.Add(1); ops.Add(int64(n)) }})
	defer p.Close()
	waitConnectedB(b, p)
	cmd := resp.AppendCommandString(nil, "SET", "k", "v")
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var wg sync.WaitGroup
		for pb.Next() {
			wg.Add(1)
			if err := p.Submit(Op{Cmd: cmd, C: wgCompleter{&wg}}); err != nil {
				b.Error(err)
				return
			}
			wg.Wait()
		}
	})
	if w := writes.Load(); w > 0 {
		b.ReportMetric(float64(ops.Load())/float64(w), "ops/write")
	}
}
