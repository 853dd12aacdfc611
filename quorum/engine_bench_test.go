package quorum

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// queuePipe is a master for benchmarks: it keeps what the engine submits
// until the benchmark answers it, without a lock (one goroutine).
type queuePipe struct{ ops []batching.Op }

func (p *queuePipe) Submit(op batching.Op) error   { p.ops = append(p.ops, op); return nil }
func (p *queuePipe) Up() (bool, error)             { return true, nil }
func (p *queuePipe) Depth() (queued, inflight int) { return 0, 0 }
func (p *queuePipe) Stalled(int64) time.Duration   { return 0 }
func (p *queuePipe) Addr() string                  { return "bench" }
func (p *queuePipe) Close()                        {}

// BenchmarkEngineSetNX is the engine's own CPU per SET NX, as redis-benchmark
// -P 16 -c 50 drives it: requests arrive 16 at a time, about 800 are in
// flight, and 5 masters answer each in the order it was sent, the way
// lockproxy's pipelines do, OK where the key is free and nil where it is
// held (so most are refused, as in make bench's scenario 1). It leaves out
// the sockets and RESP: what it measures is the vote, the key queue, the
// late-undo record, the deadlines and request recycling. Compare runs with
// benchstat; the end-to-end figure is make bench's.
func BenchmarkEngineSetNX(b *testing.B) {
	const (
		masters  = 5
		batch    = 16
		inFlight = 800
		keySpace = 100000
	)
	e := fakeEngine(masters)
	defer e.timers.close()
	pipes := make([]*queuePipe, masters)
	for i := range pipes {
		pipes[i] = &queuePipe{}
		e.pipes = append(e.pipes, pipes[i])
	}
	keys := make([][]byte, keySpace)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	held := make([][masters]bool, keySpace)
	token := []byte("val")
	w := NewWaiter()
	type sent struct {
		r *Request
		k int
	}
	var open []sent                  // submitted, not released, in order
	answered := make([]int, masters) // ops of pipes[i] answered so far
	rnd := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		for j := 0; j < batch; j++ {
			rnd = rnd*6364136223846793005 + 1442695040888963407
			k := int(rnd>>33) % keySpace
			r := e.Acquire(keys[k], token, 10*time.Second, batching.Now())
			e.Submit(w, r)
			open = append(open, sent{r, k})
		}
		// Each master answers what it was sent more than inFlight
		// requests ago, in order.
		for i, p := range pipes {
			upto := len(p.ops) - inFlight
			for ; answered[i] < upto; answered[i]++ {
				op := p.ops[answered[i]]
				if op.C == nil {
					// An undo of a split vote, fire and forget: the
					// master's copy stays held here, which only makes
					// later acquisitions of the key refused there.
					continue
				}
				r := op.C.(*Request)
				k := keyOf(r)
				rep := resp.ReplyNil
				if !held[k][i] {
					held[k][i] = true
					rep = resp.ReplyOK
				}
				op.C.Complete(i, rep, nil)
			}
			if answered[i] > 4096 {
				p.ops = append(p.ops[:0], p.ops[answered[i]:]...)
				answered[i] = 0
			}
		}
		// The client reads its outcomes in order.
		for len(open) > 0 && open[0].r.Decided() {
			open[0].r.Release()
			open = open[1:]
		}
		if cap(open) > 4*inFlight && len(open) < inFlight {
			open = append([]sent(nil), open...)
		}
	}
}

// keyOf finds the key index of r's command (key:N), without a map.
func keyOf(r *Request) int {
	k := r.Key
	n := 0
	for i := len("key:"); i < len(k); i++ {
		n = n*10 + int(k[i]-'0')
	}
	return n
}
