package quorum

import (
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Late undos against the later requests of the same token through this
// proxy: extensions that counted the failed attempt's write, a release of
// the token, and a stress test of the references that deferral keeps. Each
// failed before its fix (found by a review of the deferral). The model
// master below runs SET NX, a compare-and-delete release ("REL k tok"), the
// engine's PEXPIRE and the undo script (lockMaster, lockmodel_test.go).

func submitExtend(e *Engine, key string) (*Request, *Waiter) {
	w := NewWaiter()
	r := e.Extend([]byte(key), 10*time.Second, batching.Now())
	e.Submit(w, r)
	return r, w
}

// TestLateUndoSparesAKeyAGrantedExtendCounted: the ordinary lock
// library flow — refused, retried with the same token, granted, extended —
// while master 4 is slow. P1's late undo on master 4 is deferred until P2's
// outcome there (dafde7e); P2 answers nil there (P1's token is in place), so
// the undo is sent — but only now, behind the client's extend E, which found
// P1's token on master 4 and counted it as a yes. The undo then deletes the
// key E's grant counts on: E is granted on 0, 1 and 4 (masters 2 and 3 missed
// it and keep P2's old expiry); after the undo the extended lock is on 2 of
// 5 masters, and once P2's original TTL passes a stranger wins 2, 3, 4 while
// the client holds a valid extension. The extension must hold the undo back
// where it counted the token.
func TestLateUndoSparesAKeyAGrantedExtendCounted(t *testing.T) {
	const tok = "tokA"
	e, ms := lockEngine(t)
	ms[1].val, ms[2].val, ms[3].val = "B", "B", "B"
	// P1: yes on 0, refused on 1-3, master 4 slow: lost early, undone on 0.
	p1, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		ms[i].step()
	}
	e.Wait(w)
	if p1.reply.Type != resp.Nil {
		t.Fatalf("P1: %v %v", p1.reply, p1.err)
	}
	ms[0].drain() // P1's undo at the decision
	// B releases (through another proxy).
	ms[1].val, ms[2].val, ms[3].val = "", "", ""
	// P2, the library's retry with the same token: granted on 0-3.
	p2, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		ms[i].step()
	}
	e.Wait(w)
	if !p2.reply.IsOK() {
		t.Fatalf("P2: %v %v", p2.reply, p2.err)
	}
	// E: the client extends. Masters 0 and 1 say yes; on 2 and 3 it
	// expires before being written (overloaded); master 4 is still slow.
	ext, w := submitExtend(e, "k")
	ms[0].step()
	ms[1].step()
	ms[2].expireNext()
	ms[3].expireNext()
	// Master 4 resumes: P1 writes tokA (late yes), P2 finds it (nil), E
	// finds it (:1, in time), then whatever was queued behind.
	ms[4].drain()
	e.Wait(w)
	if ext.Outcome() != Granted { // its reply: {1, digest of tokA}
		t.Fatalf("E: %v %v (want granted)", ext.reply, ext.err)
	}
	if !ext.yesAt(4) {
		t.Fatalf("E did not count master 4")
	}
	holders := 0
	for i, m := range ms {
		if ext.yesAt(i) && m.val == tok {
			holders++
		}
	}
	if ms[4].val != tok {
		t.Fatalf("E was granted counting master 4's key, then P1's late undo deleted it: the extension is on %d masters (< quorum %d) once P2's original expiry passes on 2 and 3", holders, e.Q())
	}
}

// TestLateUndoSparesAKeyAHoldersExtendCounted: the same without a
// retry. The holder of tokA (on 0-2) re-sends its SET NX (issue 11), which
// loses, writes tokA on the slow master 4 late, and then extends. E counts
// master 4 (P1's write) as a yes; P1's late undo must not delete it.
func TestLateUndoSparesAKeyAHoldersExtendCounted(t *testing.T) {
	const tok = "tokA"
	e, ms := lockEngine(t)
	ms[0].val, ms[1].val, ms[2].val = tok, tok, tok // the client's lock G0
	p1, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		ms[i].step() // nil, nil, nil, OK
	}
	e.Wait(w)
	if p1.reply.Type != resp.Nil {
		t.Fatalf("P1: %v %v", p1.reply, p1.err)
	}
	ms[3].drain() // P1's undo at the decision
	ext, w := submitExtend(e, "k")
	ms[0].step()
	ms[1].step()
	ms[2].expireNext() // master 2 keeps G0's old expiry
	ms[3].step()       // :0
	ms[4].drain()      // P1 (late OK), E (:1, in time), P1's undo
	e.Wait(w)
	if ext.Outcome() != Granted || !ext.yesAt(4) {
		t.Fatalf("E: %v %v, counted master 4: %v", ext.reply, ext.err, ext.yesAt(4))
	}
	if ms[4].val != tok {
		t.Fatalf("E was granted with yes from 0, 1 and 4; P1's late undo then deleted tokA on 4: the extension holds on 2 masters once G0's old expiry passes on master 2")
	}
}

// TestLateUndoAfterSameTokenRelease: a release of the failed attempt's own
// token that ran after it on the slow master deleted what it wrote there;
// the token can then be written again by a grant this proxy does not see
// (the same client through another proxy, or any fixed-token client), and
// P1's late undo, queued behind the release, would delete that grant's key.
// So the release holds the undo back (nothing is left behind: the release
// removed P1's token itself). A release of another token does not
// (TestLateUndoAfterARelease).
func TestLateUndoAfterSameTokenRelease(t *testing.T) {
	const tok = "host-1"
	e, ms := lockEngine(t)
	ms[0].val, ms[1].val, ms[2].val = tok, tok, tok // the client's lock G0
	p1, w := setNX(e, "k", tok)                     // re-sent while holding (issue 11)
	for i := 0; i < 4; i++ {
		ms[i].step()
	}
	e.Wait(w)
	if p1.reply.Type != resp.Nil {
		t.Fatalf("P1: %v %v", p1.reply, p1.err)
	}
	ms[3].drain()
	// The client releases G0 through this proxy.
	_, w = submitRel(e, "k", tok)
	for i := 0; i < 4; i++ {
		ms[i].step()
	}
	e.Wait(w)
	// Master 4 resumes: P1 writes (late yes: its undo is queued), the
	// release deletes it.
	ms[4].step()
	ms[4].step()
	if ms[4].val != "" {
		t.Fatalf("model: the release left %q", ms[4].val)
	}
	// The client acquires again through another proxy, which writes
	// host-1 on masters 2, 3 and 4 and counts them (0 and 1 are slow
	// there): a quorum.
	ms[2].val, ms[3].val, ms[4].val = tok, tok, tok
	ms[4].drain() // P1's late undo
	if ms[4].val != tok {
		t.Fatalf("P1's late undo deleted a key written after this proxy's release of the same token: the other proxy's grant is on 2 of 5 masters")
	}
}

// TestStressLateUndoRefs: clients acquire (pooled requests, two
// tokens, split-vote retries on), extend and release one key while masters
// pause at random; every master eventually runs everything. No request may
// be recycled while it is still registered on a slot, and once everything
// is answered and released every pooled request is recycled and every
// slot is empty (no reference or registration leaked by supersede/
// resolveSups/deregister).
func TestStressLateUndoRefs(t *testing.T) {
	e, fps := pipedEngine(5, time.Millisecond)
	e.cfg.NodeTimeout = 2 * time.Millisecond
	ms := make([]*lockMaster, 5)
	for i := range fps {
		ms[i] = &lockMaster{fp: fps[i], i: i}
	}
	rw := watchRecycling(t, e)
	stop := make(chan struct{})
	steppers := make([]stepper, len(ms))
	for i, m := range ms {
		steppers[i] = m
	}
	mwg := stepMasters(steppers, stop)
	var cwg sync.WaitGroup
	for c := 0; c < 4; c++ {
		cwg.Add(1)
		go func(c int) {
			defer cwg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			tok := []byte{"ab"[c%2]}
			for n := 0; n < 300; n++ {
				w := NewWaiter()
				r := e.Acquire([]byte("k"), tok, 10*time.Second, batching.Now())
				rw.created()
				e.Submit(w, r)
				e.Wait(w)
				granted := r.err == nil && r.reply.IsOK()
				r.Release()
				if granted && rng.IntN(2) == 0 {
					ext, w := submitExtend(e, "k")
					e.Wait(w)
					_ = ext
				}
				if granted || rng.IntN(4) == 0 {
					_, w := submitRel(e, "k", string(tok))
					e.Wait(w)
				}
			}
		}(c)
	}
	cwg.Wait()
	time.Sleep(50 * time.Millisecond) // retries' timers
	close(stop)
	mwg.Wait()
	rw.check(t, steppers)
}

// stepper is a hand-stepped fake master.
type stepper interface {
	step() bool
	drain()
}

// stepMasters runs each master on its own goroutine, with random pauses,
// until stop; then each drains what it was sent.
func stepMasters(ms []stepper, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range ms {
		wg.Add(1)
		go func(m stepper, seed uint64) {
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
					time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond) // paused
				}
				if !m.step() {
					time.Sleep(50 * time.Microsecond)
				}
			}
		}(ms[i], uint64(i))
	}
	return &wg
}

// recycleWatch counts the pooled requests a stress test creates and the
// engine recycles, and records any recycled while still registered on a
// late-undo slot.
type recycleWatch struct {
	e                  *Engine
	mu                 sync.Mutex
	made, recycledN    int
	recycledRegistered int
	coldUnmarked       int // recycled with r.cold written but coldDirty unset
}

func watchRecycling(t *testing.T, e *Engine) *recycleWatch {
	rw := &recycleWatch{e: e}
	onRecycle = func(r *Request) {
		eachSlot(e, func(s *keySlot) {
			for _, q := range s.waiting {
				if q.r == r {
					rw.mu.Lock()
					rw.recycledRegistered++
					rw.mu.Unlock()
				}
			}
			if s != &e.slots.multi {
				return // multiHashes is under the multi slot's lock
			}
			if _, ok := e.slots.multiHashes[r]; ok {
				rw.mu.Lock()
				rw.recycledRegistered++
				rw.mu.Unlock()
			}
		})
		if r.cold != nil && !r.coldDirty && !reflect.ValueOf(*r.cold).IsZero() {
			rw.mu.Lock()
			rw.coldUnmarked++ // the next command would inherit it
			rw.mu.Unlock()
		}
		if r.e != nil { // the engine's own children are pooled too
			rw.mu.Lock()
			rw.recycledN++
			rw.mu.Unlock()
		}
	}
	t.Cleanup(func() { onRecycle = nil })
	return rw
}

func (rw *recycleWatch) created() {
	rw.mu.Lock()
	rw.made++
	rw.mu.Unlock()
}

// check drains the masters until every pooled request (acquisitions and
// the engine's retries) is recycled or 5s pass, then fails the test if one
// was recycled while registered, one is still registered, or references
// leaked.
func (rw *recycleWatch) check(t *testing.T, ms []stepper) {
	t.Helper()
	e := rw.e
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, m := range ms {
			m.drain() // undos queued by the last replies
		}
		rw.mu.Lock()
		done := rw.recycledN >= rw.made+int(e.Retries())
		rw.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.recycledRegistered > 0 {
		t.Fatalf("%d requests recycled while registered (or their keys' hashes kept)", rw.recycledRegistered)
	}
	if rw.coldUnmarked > 0 {
		t.Fatalf("%d requests recycled with r.cold written but not marked to be cleared", rw.coldUnmarked)
	}
	waiting := 0
	eachSlot(e, func(s *keySlot) { waiting += len(s.waiting) })
	e.slots.multi.mu.Lock()
	hashes := len(e.slots.multiHashes)
	e.slots.multi.mu.Unlock()
	if n := hashes; n != 0 {
		t.Fatalf("%d multi-key requests' hashes kept after every master answered", n)
	}
	sent, lost, unconf := e.UndoStats()
	t.Logf("created %d pooled acquisitions, %d pooled requests recycled (children included), retries %d; undos sent %d lost %d unconfirmed %d; nmulti %d", rw.made, rw.recycledN, e.Retries(), sent, lost, unconf, e.slots.nmulti.Load())
	if waiting != 0 || e.slots.nmulti.Load() != 0 {
		t.Fatalf("%d requests still registered after every master answered (nmulti %d)", waiting, e.slots.nmulti.Load())
	}
	if want := rw.made + int(e.Retries()); rw.recycledN != want {
		t.Fatalf("%d pooled requests recycled, want %d (acquisitions and retries): references leaked", rw.recycledN, want)
	}
}
