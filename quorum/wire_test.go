package quorum

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// Tests at the wire: an Engine built by New over fake masters
// (internal/fakemaster), so that a request goes through the real
// pipelines, their RESP, the monitor's checks and the engine's own timer,
// while the test scripts each master's replies. The fakePipe tests
// (undo_test.go) play the masters one Complete at a time instead; these
// show that the same decisions hold when the replies come off sockets.

// wireEngine starts n fake masters, lets setup (when not nil) prepare
// each before anything connects, and starts an Engine over them with the
// split-vote retry off (retry.go has its own tests); it waits until every
// master's votes count.
func wireEngine(t *testing.T, n int, setup func(*fakemaster.Master), opts ...func(*Config)) (*Engine, []*fakemaster.Master) {
	t.Helper()
	var ms []*fakemaster.Master
	cfg := Config{NodeTimeout: 50 * time.Millisecond, SplitRetryJitter: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for range n {
		m := fakemaster.Start(t)
		if setup != nil {
			setup(m)
		}
		ms = append(ms, m)
		cfg.Masters = append(cfg.Masters, m.Addr())
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close) // before the masters close: cleanups run last first
	deadline := time.Now().Add(10 * time.Second)
	for !allCount(e) {
		if time.Now().After(deadline) {
			t.Fatalf("the fake masters' votes do not count within 10s: %+v", e.Masters())
		}
		time.Sleep(time.Millisecond)
	}
	return e, ms
}

// allCount reports whether every master is up and its votes count.
func allCount(e *Engine) bool {
	for _, m := range e.Masters() {
		if !m.Up || !m.QuarantinedUntil.IsZero() || m.Excluded != "" {
			return false
		}
	}
	return true
}

// decide submits r and waits for its decision.
func decide(t *testing.T, e *Engine, r *Request) *Request {
	t.Helper()
	w := NewWaiter()
	e.Submit(w, r)
	done := make(chan struct{})
	go func() { e.Wait(w); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not decided within 10s")
	}
	return r
}

// drain waits until every master has answered everything sent to it,
// late replies and the undos they cause included.
func drain(t *testing.T, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Drain(ctx); err != nil {
		t.Fatalf("masters not drained: %v", err)
	}
}

// undoesOf counts the undos (compare-and-delete of key and token) m got.
func undoesOf(m *fakemaster.Master, key, token string) int {
	return m.Count("EVALSHA", undoScript.SHA1, "1", key, token)
}

var (
	replyOne  = resp.Reply{Type: resp.Integer, Int: 1}
	replyZero = resp.Reply{Type: resp.Integer, Int: 0}
)

// TestWireCredentials: the masters want an ACL user's password that
// holds the word AUTH, RESP framing and bytes that are not UTF-8. Both of
// the engine's connections to each master, the pipeline and the monitor's
// (whose check must pass before the master votes), authenticate with it,
// and locks are granted.
func TestWireCredentials(t *testing.T) {
	const pass = "AUTH \r\n*2\r\n$4\r\nAUTH\r\n\x00\xff"
	e, ms := wireEngine(t, 3, func(m *fakemaster.Master) {
		m.RequirePass("lp", pass)
		m.On("SET").Reply(resp.ReplyOK)
	}, func(c *Config) { c.MasterUsername, c.MasterPassword = "lp", pass })
	r := decide(t, e, e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now()))
	if r.Outcome() != Granted {
		t.Fatalf("acquire over masters that want a password: %v %v", r.reply, r.err)
	}
	for i, m := range ms {
		conns := map[int]bool{}
		for _, c := range m.Received() {
			if c.Is("AUTH", "lp", pass) {
				conns[c.Conn] = true
			}
		}
		if len(conns) < 2 {
			t.Fatalf("master %d: AUTH on %d connections, want the pipeline's and the monitor's: %v", i, len(conns), m.Received())
		}
	}
}

// setReplies makes master i answer SET with replies[i]: a reply, or a
// closed connection when its Type is 0.
func setReplies(ms []*fakemaster.Master, replies []resp.Reply) {
	for i, m := range ms {
		if replies[i].Type == 0 {
			m.On("SET").CloseConn()
			continue
		}
		m.On("SET").Reply(replies[i])
	}
}

// TestWireVotes: SET NX reaches every master as SET key token NX PX ttl;
// the replies are counted as votes, and a failed acquisition is undone on
// exactly the masters whose reply shows it wrote there. An error that says
// the master did not run the command (LOADING) and a connection lost
// before the reply are no votes; the first needs no undo, the second
// cannot be known and is not undone (the key may be an earlier grant's
// with the same token).
func TestWireVotes(t *testing.T) {
	ok, null := resp.ReplyOK, resp.ReplyNil
	loading := resp.Reply{Type: resp.Error, Str: []byte("LOADING Redis is loading the dataset in memory")}
	closed := resp.Reply{}
	for _, c := range []struct {
		name        string
		replies     []resp.Reply
		want        Outcome
		undone      []bool
		unconfirmed int64
	}{
		{"3 of 5 yes: granted", []resp.Reply{ok, ok, ok, null, null}, Granted, make([]bool, 5), 0},
		{"2 of 5 yes: refused, undone where written", []resp.Reply{ok, ok, null, null, null}, Refused, []bool{true, true, false, false, false}, 0},
		{"3 loading: NOQUORUM, undone where written", []resp.Reply{ok, loading, ok, loading, loading}, NoQuorum, []bool{true, false, true, false, false}, 0},
		{"2 connections lost: refused, unknown not undone", []resp.Reply{ok, null, closed, ok, closed}, Refused, []bool{true, false, false, true, false}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ms := wireEngine(t, 5, func(m *fakemaster.Master) { m.On("EVALSHA", undoScript.SHA1).Reply(replyOne) })
			setReplies(ms, c.replies)
			r := decide(t, e, e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now()))
			if got := r.Outcome(); got != c.want {
				t.Fatalf("outcome %v (%v %v), want %v", got, r.reply, r.err, c.want)
			}
			drain(t, e)
			for i, m := range ms {
				if n := m.Count("SET", "k", "tok", "NX", "PX", "10000"); n != 1 {
					t.Errorf("master %d got %d SET k tok NX PX 10000, want 1: %v", i, n, m.Received())
				}
				want := 0
				if c.undone[i] {
					want = 1
				}
				if n := undoesOf(m, "k", "tok"); n != want {
					t.Errorf("master %d: %d undos, want %d", i, n, want)
				}
			}
			if _, _, unconfirmed := e.UndoStats(); unconfirmed != c.unconfirmed {
				t.Errorf("unconfirmed = %d, want %d", unconfirmed, c.unconfirmed)
			}
		})
	}
}

// TestWireEarlyDecision: a quorum of yes decides at once; the masters
// that have not answered (held) are not waited for.
func TestWireEarlyDecision(t *testing.T) {
	const nodeTimeout = 5 * time.Second
	e, ms := wireEngine(t, 5, nil, func(c *Config) { c.NodeTimeout = nodeTimeout })
	for i, m := range ms {
		rule := m.On("SET").Reply(resp.ReplyOK)
		if i >= 3 {
			rule.Hold()
			t.Cleanup(rule.Release) // before the engine closes
		}
	}
	r := decide(t, e, e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now()))
	if r.Outcome() != Granted || r.Took() >= nodeTimeout/2 {
		t.Fatalf("3 yes of 5, 2 silent: %v after %v, want granted well before node_timeout (%v)", r.Outcome(), r.Took(), nodeTimeout)
	}
}

// TestWireDeadlineAndLateUndo: two masters do not answer. The engine's
// own timer decides at node_timeout (no client calls anything): 2 yes, 1
// no and 2 silent is refused, and undone at once where the yes came from.
// When the silent masters answer late, the undo goes only to the one
// whose late reply says the attempt wrote there, never to the one that
// said nil (the key there is someone else's).
func TestWireDeadlineAndLateUndo(t *testing.T) {
	const nodeTimeout = 100 * time.Millisecond
	e, ms := wireEngine(t, 5, func(m *fakemaster.Master) { m.On("EVALSHA", undoScript.SHA1).Reply(replyOne) },
		func(c *Config) { c.NodeTimeout = nodeTimeout })
	setReplies(ms[:3], []resp.Reply{resp.ReplyOK, resp.ReplyOK, resp.ReplyNil})
	lateOK := ms[3].On("SET").Reply(resp.ReplyOK).Hold()
	lateNil := ms[4].On("SET").Reply(resp.ReplyNil).Hold()
	start := time.Now()
	r := decide(t, e, e.Acquire([]byte("k"), []byte("tok"), 10*time.Second, batching.Now()))
	if took := time.Since(start); took < nodeTimeout || r.Outcome() != Refused || r.reply.Type != resp.Nil {
		t.Fatalf("decided %v (%v %v) after %v; want refused (nil) at node_timeout %v", r.Outcome(), r.reply, r.err, took, nodeTimeout)
	}
	for i := range 2 {
		ms[i].WaitFor(t, "the undo where the yes came from", func(cs []fakemaster.Command) bool {
			for _, c := range cs {
				if c.Is("EVALSHA", undoScript.SHA1, "1", "k", "tok") {
					return true
				}
			}
			return false
		})
	}
	if n := undoesOf(ms[3], "k", "tok") + undoesOf(ms[4], "k", "tok"); n != 0 {
		t.Fatalf("%d undos sent to masters whose reply was not in yet", n)
	}
	lateOK.Release()
	lateNil.Release()
	drain(t, e)
	for i, want := range []int{1, 1, 0, 1, 0} {
		if n := undoesOf(ms[i], "k", "tok"); n != want {
			t.Errorf("master %d: %d undos, want %d", i, n, want)
		}
	}
}

// TestWireNoScript: a master whose scripts were flushed answers NOSCRIPT.
// That reply is no vote; the engine loads the client's script again on
// that master before its next use there (quorum), and the pipeline loads
// lockproxy's own scripts again (batching), so that the master's next
// votes count. The command that met NOSCRIPT is not resent (batching's
// reloadInit says why): its vote is lost, nothing more.
func TestWireNoScript(t *testing.T) {
	body := "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
	op := &ScriptOp{SHA1: fakemaster.SHA1(body), Body: body, Kind: Extend, Yes: YesOne, No: replyZero, NoPTTLAt: -1,
		Token: Arg{Index: 1}, LockKeys: []int{1}}
	e, ms := wireEngine(t, 3, nil)
	// Master 2 says no, so every yes needs master 0's vote.
	for i, m := range ms {
		rep := replyOne
		if i == 2 {
			rep = replyZero
		}
		m.On("EVALSHA", op.SHA1).Reply(rep)
		if i == 2 {
			m.On("EVALSHA", extendScript.SHA1).Reply(checkedReply(rep, true, true, 10_000))
		} else {
			m.On("EVALSHA", extendScript.SHA1).Reply(checkedReply(resp.Reply{Type: resp.Array, Elems: []resp.Reply{replyOne, {Type: resp.Bulk, Str: []byte("digest")}}}, true, true, 10_000))
		}
	}
	extend := func() *Request {
		return decide(t, e, e.Script(op, [][]byte{[]byte("k")}, [][]byte{[]byte("tok"), []byte("10000")}, 10*time.Second, batching.Now()))
	}
	if r := extend(); r.Outcome() != Granted {
		t.Fatalf("before the flush: %v %v %v", r.Outcome(), r.reply, r.err)
	}
	ms[0].FlushScripts()
	if r := extend(); r.Outcome() != NotHeld {
		t.Fatalf("NOSCRIPT on master 0: %v %v %v, want not held (1 yes of 3)", r.Outcome(), r.reply, r.err)
	}
	if r := extend(); r.Outcome() != Granted {
		t.Fatalf("the client's script was not loaded again on master 0: %v %v %v; master 0 got %v", r.Outcome(), r.reply, r.err, ms[0].Received())
	}
	if r := decide(t, e, e.Extend([]byte("k"), 10*time.Second, batching.Now())); r.Outcome() != Granted {
		t.Fatalf("lockproxy's own scripts were not loaded again on master 0: %v %v %v; master 0 got %v", r.Outcome(), r.reply, r.err, ms[0].Received())
	}
	evalshas := 0
	for _, c := range ms[0].Received() {
		if c.Is("EVALSHA", op.SHA1) {
			evalshas++
		}
	}
	if evalshas != 3 {
		t.Fatalf("master 0 got the script %d times for 3 requests: a resend?", evalshas)
	}
}

// TestWireStalledMasterNotAsked: once a master has left a command
// unanswered for longer than node_timeout (paused), acquisitions are not
// sent to it: they decide on the others at once instead of waiting for
// its deadline, and leave no token there for a late undo. Releases still
// go to it. Remove the Stalled check in dispatch to see the second
// acquisition reach the paused master and wait node_timeout.
func TestWireStalledMasterNotAsked(t *testing.T) {
	const nodeTimeout = 200 * time.Millisecond
	e, ms := wireEngine(t, 3, nil, func(c *Config) { c.NodeTimeout = nodeTimeout })
	paused := ms[2].On("SET").Reply(resp.ReplyOK).Hold()
	t.Cleanup(paused.Release)
	// Masters 0 and 1: the first key is free, the second is held by
	// someone else on master 1 (a split: only master 2 could settle it).
	ms[0].On("SET").Reply(resp.ReplyOK)
	ms[1].On("SET").Reply(resp.ReplyOK)
	ms[1].On("SET", "k2").Reply(resp.ReplyNil)
	r1 := decide(t, e, e.Acquire([]byte("k1"), []byte("t"), 10*time.Second, batching.Now()))
	if r1.Outcome() != Granted {
		t.Fatalf("k1 on 2 of 3 with one paused: %v %v", r1.Outcome(), r1.err)
	}
	time.Sleep(nodeTimeout + 50*time.Millisecond) // master 2 is now stalled
	start := time.Now()
	r2 := decide(t, e, e.Acquire([]byte("k2"), []byte("t"), 10*time.Second, batching.Now()))
	if took := time.Since(start); r2.Outcome() != Refused || took > nodeTimeout/2 {
		t.Fatalf("k2 (yes, no, stalled): %v after %v; want refused at once, without waiting node_timeout %v", r2.Outcome(), took, nodeTimeout)
	}
	if n := ms[2].Count("SET", "k2"); n != 0 {
		t.Fatalf("the stalled master was sent k2's SET (%d times): its token there would need a late undo", n)
	}
	decide(t, e, e.Del([][]byte{[]byte("k1")}, batching.Now()))
	paused.Release() // the master resumes: the release, queued behind, reaches it
	ms[2].WaitFor(t, "the release sent to the stalled master", func(cs []fakemaster.Command) bool {
		for _, c := range cs {
			if c.Is("EVALSHA", delScript.SHA1, "1", "k1") {
				return true
			}
		}
		return false
	})
}

// TestWireCommonYes: yes replies may differ (Redisson's re-entrant unlock
// answers 1 where it deleted the lock, 0 where a count is left, say a
// late undo's leftover on one master); the client gets the one most
// masters gave, not the first master's. With the first master's, the
// holder was told "still held" by a quorum's release and kept renewing.
func TestWireCommonYes(t *testing.T) {
	body := "return redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 and 0 or 1"
	op := &ScriptOp{SHA1: fakemaster.SHA1(body), Body: body, Kind: Release, Yes: YesNonNegative, No: resp.ReplyNil, NoPTTLAt: -1,
		Token: Arg{Index: 1}, LockKeys: []int{1}}
	e, ms := wireEngine(t, 3, nil)
	for i, m := range ms {
		rep := replyOne
		if i == 0 {
			rep = replyZero // a leftover count there
		}
		m.On("EVALSHA", op.SHA1).Reply(rep)
	}
	r := decide(t, e, e.Script(op, [][]byte{[]byte("k")}, [][]byte{[]byte("tok")}, 0, batching.Now()))
	if rep, err := r.Result(); err != nil || !rep.IsInt(1) {
		t.Fatalf("replies 0, 1, 1: the client got %v %v, want 1 (what two of three said)", rep, err)
	}
}
