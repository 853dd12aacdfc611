package quorum

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// A fenced acquisition's continuation (counter.go) against fake masters:
// the client gets the max-register's value when the grant is still valid
// once it is acknowledged; else the grant is undone and the client told it
// did not get the lock, or given the counter's error.

// fencedOp is the fenced acquire script of docs/fencing.md.
var fencedOp = &ScriptOp{SHA1: "f00d", Preloaded: true, Kind: Acquire, Yes: YesPositive,
	No: resp.Reply{Type: resp.Integer}, NoIsNoop: true, Undo: UndoDelIfValue,
	Token: Arg{Index: 1}, LockKeys: []int{1}, Counter: Arg{Keys: true, Index: 2}}

// answerOp completes op n (0-based) sent to each master with rep.
func answerOp(fps []*fakePipe, n int, rep resp.Reply) {
	for i, fp := range fps {
		fp.sent()[n].C.Complete(i, rep, nil)
	}
}

// waitSent polls until every master got n ops.
func waitSent(t *testing.T, fps []*fakePipe, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, fp := range fps {
		for len(fp.sent()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("a master got %d ops, want %d", len(fp.sent()), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func fencedAcquire(e *Engine, ttl time.Duration) (*Request, *Waiter) {
	w := NewWaiter()
	r := e.Script(fencedOp, [][]byte{[]byte("lock"), []byte("lock:fence")},
		[][]byte{[]byte("tok"), []byte("10000")}, ttl, batching.Now())
	e.Submit(w, r)
	return r, w
}

func counterPair(v string) resp.Reply {
	val := resp.ReplyNil
	if v != "" {
		val = resp.Reply{Type: resp.Bulk, Str: []byte(v)}
	}
	return resp.Reply{Type: resp.Array, Elems: []resp.Reply{val, {Type: resp.Integer, Int: -1}}}
}

func TestFencedGrantAnswersTheMaxRegister(t *testing.T) {
	e, fps := pipedEngine(3, -1)
	r, w := fencedAcquire(e, 10*time.Second)
	answerOp(fps, 0, resp.Reply{Type: resp.Integer, Int: 3}) // each master's own INCR
	if r.Decided() {
		t.Fatal("the grant was answered before its token")
	}
	waitSent(t, fps, 2) // the counter's read
	if !bytes.Contains(fps[0].sent()[1].Cmd, []byte(counterReadScript.SHA1)) {
		t.Fatalf("second op %q, want the counter's read", fps[0].sent()[1].Cmd)
	}
	for i, v := range []string{"41", "40", ""} {
		ops := fps[i].sent()
		ops[1].C.Complete(i, counterPair(v), nil)
	}
	waitSent(t, fps, 3) // the write of 42
	if cmd := fps[2].sent()[2].Cmd; !bytes.Contains(cmd, []byte(counterWriteScript.SHA1)) || !bytes.Contains(cmd, []byte("$2\r\n42\r\n")) {
		t.Fatalf("third op %q, want the counter's write of 42", cmd)
	}
	answerOp(fps, 2, resp.Reply{Type: resp.Integer, Int: 1})
	e.Wait(w)
	if rep, err := r.Result(); err != nil || !rep.IsInt(42) || r.Outcome() != Granted || r.Validity() <= 0 {
		t.Fatalf("fenced grant: %v %v %v validity %v, want :42 granted", rep, err, r.Outcome(), r.Validity())
	}
	for i, fp := range fps {
		if fp.undos() != 0 {
			t.Errorf("master %d got an undo", i)
		}
	}
}

// TestFencedGrantTooLateIsLeftToExpire: the token's copies of a fenced
// grant whose validity ran out before its write was acknowledged are not
// undone: by then they may have expired and the token been granted again
// through another lockproxy (undoStale), so they are left to their TTL,
// which has all but run out.
func TestFencedGrantTooLateIsLeftToExpire(t *testing.T) {
	e, fps := pipedEngine(3, -1)
	r, w := fencedAcquire(e, 30*time.Millisecond)
	answerOp(fps, 0, resp.Reply{Type: resp.Integer, Int: 1})
	waitSent(t, fps, 2)
	answerOp(fps, 1, counterPair("1"))
	waitSent(t, fps, 3)
	// The validity (30ms minus drift) runs out before the write is
	// acknowledged: the token could follow a later holder's.
	time.Sleep(30 * time.Millisecond)
	answerOp(fps, 2, resp.Reply{Type: resp.Integer, Int: 1})
	e.Wait(w)
	if rep, err := r.Result(); err != nil || !rep.IsInt(0) || r.Outcome() != Refused {
		t.Fatalf("token acknowledged after the validity: %v %v %v, want :0 refused", rep, err, r.Outcome())
	}
	for i, fp := range fps {
		if fp.undos() != 0 {
			t.Errorf("master %d got %d undos, want 0: sent %v after T0, an undo may delete a later grant of the token", i, fp.undos(), r.TTL)
		}
	}
}

func TestFencedGrantCounterErrorIsUndone(t *testing.T) {
	e, fps := pipedEngine(3, -1)
	r, w := fencedAcquire(e, 10*time.Second)
	answerOp(fps, 0, resp.Reply{Type: resp.Integer, Int: 1})
	waitSent(t, fps, 2)
	// The counter key holds a lock's token: INCR would refuse it.
	answerOp(fps, 1, resp.Reply{Type: resp.Array, Elems: []resp.Reply{
		{Type: resp.Bulk, Str: []byte("a-token")}, {Type: resp.Integer, Int: 5000}}})
	e.Wait(w)
	var ce *CounterError
	if rep, err := r.Result(); !errors.As(err, &ce) || ce.Why != NotInteger || r.Outcome() != Failed {
		t.Fatalf("counter holding a token: %v %v %v", rep, err, r.Outcome())
	}
	for i, fp := range fps {
		if fp.undos() != 1 {
			t.Errorf("master %d got %d undos, want 1", i, fp.undos())
		}
	}
}

// TestCounterGetIsNotALockRead: GET answers a counter's maximum only when
// no reply has an expiry: a token held by one master of three, even an
// integer one, is never answered.
func TestCounterGetIsNotALockRead(t *testing.T) {
	e, fps := pipedEngine(3, -1)
	get := func(replies ...resp.Reply) *Request {
		w := NewWaiter()
		r := e.Get([]byte("k"), batching.Now())
		e.Submit(w, r)
		for i, fp := range fps {
			ops := fp.sent()
			ops[len(ops)-1].C.Complete(i, replies[i], nil)
		}
		return r
	}
	lock := resp.Reply{Type: resp.Array, Elems: []resp.Reply{{Type: resp.Bulk, Str: []byte("7")}, {Type: resp.Integer, Int: 900}}}
	if r := get(lock, counterPair(""), counterPair("")); !r.Decided() || r.reply.Type != resp.Nil {
		t.Fatalf("GET of an integer token on one master: %v", r.reply)
	}
	if r := get(lock, counterPair("3"), counterPair("")); !r.Decided() || r.reply.Type != resp.Nil {
		t.Fatalf("GET of a token on one master, a counter on another: %v", r.reply)
	}
	if r := get(counterPair("5"), counterPair("5"), counterPair("")); !r.Decided() || string(r.reply.Str) != "5" {
		t.Fatalf("GET of a counter a quorum holds: %v", r.reply)
	}
	r := get(counterPair("6"), counterPair(""), counterPair("4"))
	if r.Decided() {
		t.Fatal("GET of a counter no quorum holds was answered before its write-back")
	}
	waitSent(t, fps, 5)
	answerOp(fps, 4, resp.Reply{Type: resp.Integer, Int: 1})
	if !r.Decided() || r.reply.Type != resp.Bulk || string(r.reply.Str) != "6" {
		t.Fatalf("GET after the write-back: %v", r.reply)
	}
}

// TestLostVoteWithoutAPTTLWaits: a Redisson-style acquire (yes nil, no the
// holder's PTTL) lost with no master answering a PTTL (one yes, two
// different error replies: no quorum agrees on one, which would be relayed,
// TestLostVoteQuorumError) answers node_timeout as the PTTL, not the analyzer's
// placeholder 0, which Redisson reads as "try again now": it retried in a
// tight loop for as long as the cause lasted (found by review). The same
// reply for a lost re-entry (reentrant.go) and a grant without validity.
func TestLostVoteWithoutAPTTLWaits(t *testing.T) {
	e, fps := pipedEngine(3, -1)
	op := &ScriptOp{SHA1: "beef", Preloaded: true, Kind: Acquire, Yes: VoteRule{Type: resp.Nil},
		No: resp.Reply{Type: resp.Integer}, NoPTTLAt: 0, NoIsNoop: true, Undo: UndoHashDecr,
		Token: Arg{Index: 2}, LockKeys: []int{1}}
	w := NewWaiter()
	r := e.Script(op, [][]byte{[]byte("lock")}, [][]byte{[]byte("30000"), []byte("tok")}, 30*time.Second, batching.Now())
	e.Submit(w, r)
	noRepl := resp.Reply{Type: resp.Error, Str: []byte("NOREPLICAS Not enough good replicas to write.")}
	fps[0].sent()[0].C.Complete(0, resp.ReplyNil, nil)
	fps[1].sent()[0].C.Complete(1, noRepl, nil)
	fps[2].sent()[0].C.Complete(2, resp.Reply{Type: resp.Error, Str: []byte("LOADING Redis is loading the dataset in memory")}, nil)
	e.Wait(w)
	rep, err := r.Result()
	if err != nil || r.Outcome() != Refused || !rep.IsInt(e.cfg.NodeTimeout.Milliseconds()) {
		t.Fatalf("lost with no PTTL from a master: %v %v %v, want :%d (node_timeout) refused", rep, err, r.Outcome(), e.cfg.NodeTimeout.Milliseconds())
	}
}

// TestLostVoteQuorumError: a Redisson-style acquire (yes nil, no the
// holder's PTTL) lost where no master answered a PTTL but a quorum
// answered the same error reply: the client gets that error, as one Redis
// would have answered it. RedissonNonReentrantLock answers its holder's
// re-entry with redis.error_reply(ARGV[3]) ("NON_REENTRANT_REACQUIRE"),
// which the library turns into IllegalMonitorStateException; lockproxy
// answered node_timeout as a PTTL instead, and the holder waited for its
// own lock, again and again, for as long as it held it.
func TestLostVoteQuorumError(t *testing.T) {
	reentry := resp.Reply{Type: resp.Error, Str: []byte("NON_REENTRANT_REACQUIRE")}
	for _, tc := range []struct {
		name    string
		replies []resp.Reply
	}{
		{"every master", []resp.Reply{reentry, reentry, reentry}},
		{"a quorum, one yes", []resp.Reply{resp.ReplyNil, reentry, reentry}},
		{"a quorum, one PTTL-less other error", []resp.Reply{reentry, {Type: resp.Error, Str: []byte("LOADING Redis is loading the dataset in memory")}, reentry}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, fps := pipedEngine(3, -1)
			op := &ScriptOp{SHA1: "beef", Preloaded: true, Kind: Acquire, Yes: VoteRule{Type: resp.Nil},
				No: resp.Reply{Type: resp.Integer}, NoPTTLAt: 0, NoIsNoop: true, Undo: UndoHashDecr,
				Token: Arg{Index: 2}, LockKeys: []int{1}}
			w := NewWaiter()
			r := e.Script(op, [][]byte{[]byte("lock")}, [][]byte{[]byte("30000"), []byte("tok")}, 30*time.Second, batching.Now())
			e.Submit(w, r)
			for i, rep := range tc.replies {
				fps[i].sent()[0].C.Complete(i, rep, nil)
			}
			e.Wait(w)
			rep, err := r.Result()
			if err != nil || !rep.Equal(reentry) {
				t.Fatalf("lost to a quorum's error: %v %v, want the masters' %q", rep, err, reentry.Str)
			}
		})
	}
}
