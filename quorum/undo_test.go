package quorum

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// fakePipe records what the engine submits to one master; the test plays
// the master by completing the ops.
type fakePipe struct {
	mu  sync.Mutex
	ops []batching.Op
}

func (p *fakePipe) Submit(op batching.Op) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops = append(p.ops, op)
	return nil
}
func (p *fakePipe) Up() (bool, error)             { return true, nil }
func (p *fakePipe) Depth() (queued, inflight int) { return 0, 0 }
func (p *fakePipe) Stalled(int64) time.Duration   { return 0 }
func (p *fakePipe) Addr() string                  { return "fake" }
func (p *fakePipe) Close()                        {}

// sent returns the commands submitted so far, in order.
func (p *fakePipe) sent() []batching.Op {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]batching.Op(nil), p.ops...)
}

// next returns the op after the *ran already run, and counts it run; false
// when none is left (the fake masters of the model tests step with it).
func (p *fakePipe) next(ran *int) (batching.Op, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *ran >= len(p.ops) {
		return batching.Op{}, false
	}
	*ran++
	return p.ops[*ran-1], true
}

// undos counts the undo commands among them.
func (p *fakePipe) undos() int {
	n := 0
	for _, op := range p.sent() {
		if bytes.Contains(op.Cmd, []byte(undoScript.SHA1)) {
			n++
		}
	}
	return n
}

// pipedEngine is a fake engine whose masters are fakePipes.
func pipedEngine(n int, retryJitter time.Duration) (*Engine, []*fakePipe) {
	e := fakeEngine(n)
	e.cfg.SplitRetryJitter = retryJitter
	var fps []*fakePipe
	for i := 0; i < n; i++ {
		fp := &fakePipe{}
		fps = append(fps, fp)
		e.pipes = append(e.pipes, fp)
	}
	return e, fps
}

// setNX submits SET key token NX PX 10000 as the proxy does.
func setNX(e *Engine, key, token string) (*Request, *Waiter) {
	w := NewWaiter()
	r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: 1, Key: key,
		cmd:       resp.AppendCommand(nil, []byte("SET"), []byte(key), []byte(token), []byte("NX"), []byte("PX"), []byte("10000")),
		undoKeys:  [][]byte{[]byte(key)},
		undoToken: []byte(token), undoOp: UndoDelIfValue, token: []byte(token),
		exclusive: true, nilIsNoop: true,
		TTL: 10 * time.Second, noRk: rkNil, t0: batching.Now()}
	e.Submit(w, r)
	return r, w
}

// answer completes master i's first op of r.
func answer(fps []*fakePipe, i int, rep resp.Reply, err error) {
	ops := fps[i].sent()
	ops[0].C.Complete(i, rep, err)
}

// TestUndoSparesAKeyTheAttemptDidNotWrite (issue 11, item 1): a holder
// re-sends its own SET NX while one of the masters holding its key is slow.
// The attempt fails; its undo must not reach the slow master until its
// reply shows the attempt wrote there, or it deletes the holder's key.
func TestUndoSparesAKeyTheAttemptDidNotWrite(t *testing.T) {
	for _, late := range []struct {
		name     string
		rep      resp.Reply
		err      error
		wantUndo int
	}{
		{"late nil: the key was already there", resp.ReplyNil, nil, 0},
		{"late OK: the attempt wrote it", resp.ReplyOK, nil, 1},
		{"connection lost: unknown", resp.Reply{}, errors.New("EOF"), 0},
	} {
		t.Run(late.name, func(t *testing.T) {
			e, fps := pipedEngine(5, -1)
			// Masters 0, 1 (and slow 2) hold the key with tokA; 3 and 4
			// do not.
			r, _ := setNX(e, "k", "tokA")
			answer(fps, 0, resp.ReplyNil, nil)
			answer(fps, 1, resp.ReplyNil, nil)
			answer(fps, 3, resp.ReplyOK, nil)
			answer(fps, 4, resp.ReplyOK, nil)
			if r.Decided() {
				t.Fatal("2 yes, 2 no, 1 outstanding: a quorum is still possible")
			}
			r.expire()
			if !r.Decided() || r.err != nil || r.reply.Type != resp.Nil {
				t.Fatalf("want nil (not acquired), got %v %v", r.reply, r.err)
			}
			for i, want := range []int{0, 0, 0, 1, 1} {
				if got := fps[i].undos(); got != want {
					t.Fatalf("master %d: %d undos at the decision, want %d", i, got, want)
				}
			}
			answer(fps, 2, late.rep, late.err)
			if got := fps[2].undos(); got != late.wantUndo {
				t.Fatalf("slow master: %d undos after its late reply, want %d", got, late.wantUndo)
			}
			_, _, unconfirmed := e.UndoStats()
			if want := int64(0); late.err != nil {
				want = 1
				if unconfirmed != want {
					t.Fatalf("unconfirmed = %d, want %d", unconfirmed, want)
				}
			}
		})
	}
}

// TestReleaseUnconfirmedIsReleased (issue 11, item 9): the holder's key is
// on masters 0, 1, 2 (3 and 4 were away when it was granted); 2 is paused
// at release time. 0 and 1 delete it, 3 and 4 answer 0 (no key): the
// token is left at most on master 2, fewer than a quorum, so the holder
// hears that the release worked, not "not the owner".
func TestReleaseUnconfirmedIsReleased(t *testing.T) {
	one := resp.Reply{Type: resp.Integer, Int: 1}
	zero := resp.Reply{Type: resp.Integer, Int: 0}
	release := func(e *Engine) *Request {
		w := NewWaiter()
		r := &Request{kind: Release, agg: AggVote, rule: &YesOne, nkeys: 1, Key: "k",
			cmd: []byte("release"), noRk: rkZero, t0: batching.Now()}
		e.Submit(w, r)
		return r
	}
	e, fps := pipedEngine(5, -1)
	r := release(e)
	answer(fps, 0, one, nil)
	answer(fps, 1, one, nil)
	answer(fps, 3, zero, nil)
	answer(fps, 4, zero, nil)
	if r.Decided() {
		t.Fatal("decided while the paused master may still hold the token")
	}
	r.expire()
	if !r.Decided() || r.err != nil || !r.reply.Equal(one) {
		t.Fatalf("valid holder's release with a master paused: got %v %v, want 1", r.reply, r.err)
	}

	// Three masters say "not ours": the token cannot be on a quorum, which
	// is known without waiting for the rest.
	e, fps = pipedEngine(5, -1)
	r = release(e)
	answer(fps, 0, one, nil)
	for _, i := range []int{2, 3, 4} {
		answer(fps, i, zero, nil)
	}
	if !r.Decided() || r.err != nil || !r.reply.Equal(zero) {
		t.Fatalf("3 of 5 not ours: got %v %v (decided %v), want 0", r.reply, r.err, r.Decided())
	}

	// Fewer than a quorum answering is NOQUORUM, as before.
	e, fps = pipedEngine(5, -1)
	r = release(e)
	answer(fps, 0, one, nil)
	answer(fps, 1, one, nil)
	r.expire()
	var nq *NoQuorumError
	if !errors.As(r.err, &nq) {
		t.Fatalf("2 of 5 answered: want NOQUORUM, got %v %v", r.reply, r.err)
	}
}

// TestSplitVoteRetried (issue 11, item 11): an acquisition that lost with
// some yes votes is undone and tried once more, behind its undo on every
// master; the retry's outcome is what the client gets.
func TestSplitVoteRetried(t *testing.T) {
	e, fps := pipedEngine(5, time.Millisecond)
	r, w := setNX(e, "k", "tok")
	answer(fps, 0, resp.ReplyOK, nil)
	answer(fps, 1, resp.ReplyOK, nil)
	for _, i := range []int{2, 3, 4} {
		answer(fps, i, resp.ReplyNil, nil) // other proxies' attempts
	}
	if r.Decided() {
		t.Fatal("a split vote was published instead of retried")
	}
	// The retry reaches every master; on 0 and 1 behind the undo.
	deadline := time.Now().Add(5 * time.Second)
	for len(fps[4].sent()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no retry within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		ops := fps[i].sent()
		want := 2
		if i < 2 {
			want = 3
			if !bytes.Contains(ops[1].Cmd, []byte(undoScript.SHA1)) {
				t.Fatalf("master %d: the retry overtook the undo", i)
			}
		}
		if len(ops) != want {
			t.Fatalf("master %d got %d commands, want %d", i, len(ops), want)
		}
	}
	for i := 0; i < 3; i++ {
		ops := fps[i].sent()
		ops[len(ops)-1].C.Complete(i, resp.ReplyOK, nil)
	}
	done := make(chan struct{})
	go func() { e.Wait(w); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the retry's decision never reached the client")
	}
	if r.err != nil || !r.reply.IsOK() || r.validity <= 0 {
		t.Fatalf("retry granted by 3 of 5: client got %v %v validity %v", r.reply, r.err, r.validity)
	}
	if r.Outcome() != Granted {
		// SETNX answers :1 and metrics count "acquired" by the outcome.
		t.Fatalf("retry granted by 3 of 5: outcome %v", r.Outcome())
	}
	if e.Retries() != 1 {
		t.Fatalf("Retries = %d, want 1", e.Retries())
	}

	// No yes at all is contention, not a split: no retry.
	e, fps = pipedEngine(5, time.Millisecond)
	r, _ = setNX(e, "k2", "tok")
	for i := 0; i < 3; i++ {
		answer(fps, i, resp.ReplyNil, nil)
	}
	if !r.Decided() || r.reply.Type != resp.Nil || e.Retries() != 0 {
		t.Fatalf("contended: decided %v reply %v retries %d", r.Decided(), r.reply, e.Retries())
	}
}

// TestEngineEnforcesDeadlines: a request whose masters do not all answer is
// decided at its deadline by the engine itself, with no client connection
// calling Expire or Wait (issue 12: the engine owns time).
func TestEngineEnforcesDeadlines(t *testing.T) {
	e, fps := pipedEngine(5, -1)
	notified := make(chan struct{}, 1)
	w := NewWaiterFunc(func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	})
	r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: 1, Key: "k",
		cmd: []byte("SET"), undoKeys: [][]byte{[]byte("k")}, undoToken: []byte("t"), undoOp: UndoDelIfValue, token: []byte("t"), nilIsNoop: true,
		TTL: 10 * time.Second, noRk: rkNil, t0: batching.Now()}
	start := time.Now()
	e.Submit(w, r)
	answer(fps, 0, resp.ReplyOK, nil)
	answer(fps, 1, resp.ReplyOK, nil)
	for !r.Decided() {
		select {
		case <-notified:
		case <-time.After(5 * time.Second):
			t.Fatal("not decided 5s after node_timeout passed")
		}
	}
	if took := time.Since(start); took < e.cfg.NodeTimeout {
		t.Fatalf("decided after %v, before node_timeout %v", took, e.cfg.NodeTimeout)
	}
	var nq *NoQuorumError
	if !errors.As(r.err, &nq) {
		t.Fatalf("2 of 5 answered by the deadline: want NOQUORUM, got %v %v", r.reply, r.err)
	}
}

// TestLostVoteNeverAnswersLikeYes (issue 13 item 4): an acquire script
// that answers a bulk "OK" (the holder's re-acquire) where the yes is the
// status +OK loses the vote; the client must get the script's "not
// acquired" reply, not the masters' "OK", which the library reads as
// success for a lock that now exists on no quorum.
func TestLostVoteNeverAnswersLikeYes(t *testing.T) {
	e, fps := pipedEngine(5, -1)
	w := NewWaiter()
	r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: 1, Key: "k", cmd: []byte("x"),
		undoKeys: [][]byte{[]byte("k")}, undoToken: []byte("t"), undoOp: UndoDelIfValue, token: []byte("t"), noIsNoop: true,
		TTL: 10 * time.Second, noRk: rkNil, t0: batching.Now()}
	e.Submit(w, r)
	bulkOK := resp.Reply{Type: resp.Bulk, Str: []byte("OK")}
	for i := 0; i < 3; i++ {
		answer(fps, i, bulkOK, nil)
	}
	answer(fps, 3, resp.ReplyNil, nil)
	answer(fps, 4, resp.ReplyNil, nil)
	if !r.Decided() || r.err != nil {
		t.Fatalf("decided %v err %v", r.Decided(), r.err)
	}
	if r.reply.Type != resp.Nil || r.Outcome() != Refused {
		t.Fatalf("lost vote answered %v (%v), want nil (refused)", r.reply, r.Outcome())
	}
}

// A master that misses a deadline shortened by the validity left (a TTL of
// a few ms) is reported as such, not as a node_timeout miss: the operator
// is told to give the lock a longer TTL, not to look at the master.
func TestValidityTimeoutNamed(t *testing.T) {
	e, _ := pipedEngine(3, -1)
	e.cfg.NodeTimeout = time.Second
	for _, c := range []struct {
		ttl  time.Duration
		want error
	}{{5 * time.Millisecond, ErrValidityTimeout}, {10 * time.Second, ErrNodeTimeout}} {
		w := NewWaiter()
		r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: 1, Key: "k",
			cmd: resp.AppendCommand(nil, []byte("SET"), []byte("k"), []byte("t"), []byte("NX"), []byte("PX"), []byte("5")),
			TTL: c.ttl, noRk: rkNil, t0: batching.Now()}
		e.Submit(w, r) // no master answers
		r.expire()
		e.Wait(w)
		var nq *NoQuorumError
		if !errors.As(r.err, &nq) || len(nq.Masters) != 3 {
			t.Fatalf("TTL %v: %v, want NOQUORUM with every master", c.ttl, r.err)
		}
		for _, m := range nq.Masters {
			if !errors.Is(m.Err, c.want) {
				t.Errorf("TTL %v: master %s: %v, want %v", c.ttl, m.Addr, m.Err, c.want)
			}
		}
	}
}
