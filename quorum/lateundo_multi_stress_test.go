package quorum

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// TestStressLateUndoRefsAcrossKeys: single- and multi-key acquisitions (pooled),
// extensions over several keys with duplicates, releases; masters pause.
// Afterwards: nothing registered (the multi slot included), nmulti 0, and
// every pooled request recycled exactly once, never while registered.
func TestStressLateUndoRefsAcrossKeys(t *testing.T) {
	e, fps := pipedEngine(5, time.Millisecond)
	e.cfg.NodeTimeout = 2 * time.Millisecond
	defer e.timers.close()
	ms := make([]*keysMaster, 5)
	for i := range fps {
		ms[i] = &keysMaster{fp: fps[i], i: i, vals: map[string]string{}, ext: map[string]bool{}}
	}
	var mu sync.Mutex
	created, recycled := 0, 0
	var bad []string
	onRecycle = func(r *Request) {
		eachSlot(e, func(s *keySlot) {
			for _, q := range s.waiting {
				if q.r == r {
					mu.Lock()
					bad = append(bad, "recycled while registered")
					mu.Unlock()
				}
			}
		})
		if r.e != nil {
			mu.Lock()
			recycled++
			mu.Unlock()
		}
	}
	t.Cleanup(func() { onRecycle = nil })
	stop := make(chan struct{})
	mwg := stepMasters(ms, stop)
	keysets := [][]string{{"A", "B"}, {"B", "A"}, {"A"}, {"B"}, {"A", "A"}, {"A", "B", "A"}}
	var cwg sync.WaitGroup
	for c := 0; c < 4; c++ {
		cwg.Add(1)
		go func(c int) {
			defer cwg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			tok := string([]byte{"ab"[c%2]})
			for n := 0; n < 150; n++ {
				ks := keysets[rng.IntN(len(keysets))]
				w := NewWaiter()
				r := pooledAcquire(tok, ks)
				mu.Lock()
				created++
				mu.Unlock()
				e.Submit(w, r)
				e.Wait(w)
				granted := r.err == nil && r.reply.IsOK()
				r.Release()
				if rng.IntN(2) == 0 {
					xs := keysets[rng.IntN(len(keysets))]
					_, w := extend(e, tok, xs...)
					e.Wait(w)
				}
				if granted || rng.IntN(4) == 0 {
					for _, k := range ks {
						_, w := submitRel(e, k, tok)
						e.Wait(w)
					}
				}
			}
		}(c)
	}
	cwg.Wait()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	mwg.Wait()
	drainUntil(ms, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return recycled >= created+int(e.Retries())
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d requests recycled while registered", len(bad))
	}
	waiting := 0
	eachSlot(e, func(s *keySlot) { waiting += len(s.waiting) })
	sent, lost, unconf := e.UndoStats()
	t.Logf("created %d, recycled %d, retries %d; undos sent %d lost %d unconfirmed %d; nmulti %d", created, recycled, e.Retries(), sent, lost, unconf, e.slots.nmulti.Load())
	if waiting != 0 || e.slots.nmulti.Load() != 0 {
		t.Fatalf("%d still registered, nmulti %d", waiting, e.slots.nmulti.Load())
	}
	if want := created + int(e.Retries()); recycled != want {
		t.Fatalf("%d recycled, want %d", recycled, want)
	}
}

// stepMasters runs each master on its own goroutine, with random pauses,
// until stop; then each drains what it was sent.
func stepMasters(ms []*keysMaster, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range ms {
		wg.Add(1)
		go func(m *keysMaster, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for {
				select {
				case <-stop:
					m.drain()
					return
				default:
				}
				if rng.IntN(50) == 0 {
					time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
				}
				if !m.step() {
					time.Sleep(50 * time.Microsecond)
				}
			}
		}(ms[i], uint64(i))
	}
	return &wg
}

// pooledAcquire is a pooled acquisition of keys with tok: SET NX for one
// key (keyed, exclusive), MSET for several, as the proxy builds them.
func pooledAcquire(tok string, keys []string) *Request {
	r := NewRequest()
	var args [][]byte
	if len(keys) == 1 {
		args = [][]byte{[]byte("SET"), []byte(keys[0]), []byte(tok), []byte("NX"), []byte("PX"), []byte("10000")}
		r.Key, r.exclusive = keys[0], true
	} else {
		args = [][]byte{[]byte("MSET")}
		for _, k := range keys {
			args = append(args, []byte(k))
		}
		args = append(args, []byte(tok))
	}
	r.kind, r.agg, r.rule, r.nkeys = Acquire, AggVote, &YesOK, len(keys)
	r.cmd = resp.AppendCommand(nil, args...)
	for _, k := range keys {
		r.undoKeys = append(r.undoKeys, []byte(k))
	}
	r.undoToken, r.undoOp, r.token, r.nilIsNoop = []byte(tok), UndoDelIfValue, []byte(tok), true
	r.TTL, r.noReply, r.t0 = 10*time.Second, resp.ReplyNil, batching.Now()
	return r
}

// drainUntil drains the masters until done or the time limit.
func drainUntil(ms []*keysMaster, limit time.Duration, done func() bool) {
	deadline := time.Now().Add(limit)
	for {
		for _, m := range ms {
			m.drain()
		}
		if done() || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
