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
	rw := watchRecycling(t, e)
	stop := make(chan struct{})
	steppers := make([]stepper, len(ms))
	for i, m := range ms {
		steppers[i] = m
	}
	mwg := stepMasters(steppers, stop)
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
				rw.created()
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
	rw.check(t, steppers)
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
	r.TTL, r.noRk, r.t0 = 10*time.Second, rkNil, batching.Now()
	return r
}
