package quorum

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// rmMaster is a keysMaster that also runs a release ("REL k tok") and keeps
// no extension marks.
type rmMaster struct {
	fp   *fakePipe
	i    int
	vals map[string]string
	ran  int
}

func (m *rmMaster) step() bool {
	ops := m.fp.sent()
	if m.ran >= len(ops) {
		return false
	}
	op := ops[m.ran]
	m.ran++
	args := commandArgs(op.Cmd)
	var rep resp.Reply
	switch args[0] {
	case "EVALSHA":
		n, _ := strconv.Atoi(args[2])
		tok := args[3+n]
		for _, k := range args[3 : 3+n] {
			if m.vals[k] == tok {
				delete(m.vals, k)
			}
		}
		return true
	case "SET":
		rep = resp.ReplyNil
		if m.vals[args[1]] == "" {
			m.vals[args[1]], rep = args[2], resp.ReplyOK
		}
	case "MSET":
		keys, tok := args[1:len(args)-1], args[len(args)-1]
		rep = resp.ReplyOK
		for _, k := range keys {
			if m.vals[k] != "" {
				rep = resp.ReplyNil
			}
		}
		if rep.IsOK() {
			for _, k := range keys {
				m.vals[k] = tok
			}
		}
	case "EXT", "MEXT":
		keys, tok := args[1:len(args)-1], args[len(args)-1]
		rep = resp.Reply{Type: resp.Integer, Int: 1}
		for _, k := range keys {
			if m.vals[k] != tok {
				rep.Int = 0
			}
		}
	case "REL":
		rep = resp.Reply{Type: resp.Integer}
		if m.vals[args[1]] == args[2] {
			delete(m.vals, args[1])
			rep.Int = 1
		}
	default:
		panic("model: " + args[0])
	}
	op.C.Complete(m.i, rep, nil)
	return true
}

func (m *rmMaster) drain() {
	for m.step() {
	}
}

// TestStressLateUndoRefsAcrossKeys: single- and multi-key acquisitions (pooled),
// extensions over several keys with duplicates, releases; masters pause.
// Afterwards: nothing registered (the multi slot included), nmulti 0, and
// every pooled request recycled exactly once, never while registered.
func TestStressLateUndoRefsAcrossKeys(t *testing.T) {
	e, fps := pipedEngine(5, time.Millisecond)
	e.cfg.NodeTimeout = 2 * time.Millisecond
	ms := make([]*rmMaster, 5)
	for i := range fps {
		ms[i] = &rmMaster{fp: fps[i], i: i, vals: map[string]string{}}
	}
	var mu sync.Mutex
	created, recycled := 0, 0
	var bad []string
	onRecycle = func(r *Request) {
		for i := 0; i <= len(e.slots.s); i++ {
			s := &e.slots.multi
			if i < len(e.slots.s) {
				s = &e.slots.s[i]
			}
			s.mu.Lock()
			for _, q := range s.waiting {
				if q.r == r {
					mu.Lock()
					bad = append(bad, "recycled while registered")
					mu.Unlock()
				}
			}
			s.mu.Unlock()
		}
		if r.e != nil {
			mu.Lock()
			recycled++
			mu.Unlock()
		}
	}
	t.Cleanup(func() { onRecycle = nil })
	stop := make(chan struct{})
	var mwg sync.WaitGroup
	for i := range ms {
		mwg.Add(1)
		go func(m *rmMaster, seed uint64) {
			defer mwg.Done()
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
				r := NewRequest()
				var args [][]byte
				if len(ks) == 1 {
					args = [][]byte{[]byte("SET"), []byte(ks[0]), []byte(tok), []byte("NX"), []byte("PX"), []byte("10000")}
					r.Key, r.exclusive = ks[0], true
				} else {
					args = [][]byte{[]byte("MSET")}
					for _, k := range ks {
						args = append(args, []byte(k))
					}
					args = append(args, []byte(tok))
				}
				r.kind, r.agg, r.rule, r.nkeys = Acquire, AggVote, &YesOK, len(ks)
				r.cmd = resp.AppendCommand(nil, args...)
				for _, k := range ks {
					r.undoKeys = append(r.undoKeys, []byte(k))
				}
				r.undoToken, r.undoOp, r.token, r.nilIsNoop = []byte(tok), UndoDelIfValue, []byte(tok), true
				r.TTL, r.noReply, r.t0 = 10*time.Second, resp.ReplyNil, batching.Now()
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, m := range ms {
			m.drain()
		}
		mu.Lock()
		done := recycled >= created+int(e.Retries())
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d requests recycled while registered", len(bad))
	}
	waiting := 0
	for i := 0; i <= len(e.slots.s); i++ {
		s := &e.slots.multi
		if i < len(e.slots.s) {
			s = &e.slots.s[i]
		}
		s.mu.Lock()
		waiting += len(s.waiting)
		s.mu.Unlock()
	}
	sent, lost, unconf := e.UndoStats()
	t.Logf("created %d, recycled %d, retries %d; undos sent %d lost %d unconfirmed %d; nmulti %d", created, recycled, e.Retries(), sent, lost, unconf, e.slots.nmulti.Load())
	if waiting != 0 || e.slots.nmulti.Load() != 0 {
		t.Fatalf("%d still registered, nmulti %d", waiting, e.slots.nmulti.Load())
	}
	if want := created + int(e.Retries()); recycled != want {
		t.Fatalf("%d recycled, want %d", recycled, want)
	}
}
