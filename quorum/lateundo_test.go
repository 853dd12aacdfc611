package quorum

import (
	"bytes"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// modelMaster plays one master over a fakePipe: it runs the submitted ops
// in order against a one-key store and completes them.
type modelMaster struct {
	fp    *fakePipe
	i     int
	val   string // "" = absent
	ran   int    // ops run so far
	reobt bool   // acquire also says OK when the key already holds the token (bsm re-obtain, rueidislock force)
}

// step runs the next submitted op, if any; it returns false when none.
func (m *modelMaster) step(tok string) bool {
	op, ok := m.fp.next(&m.ran)
	if !ok {
		return false
	}
	if bytes.Contains(op.Cmd, []byte(undoScript.SHA1)) {
		if m.val == tok {
			m.val = ""
		}
		return true // fire and forget
	}
	rep := resp.ReplyNil
	if m.val == "" || (m.reobt && m.val == tok) {
		m.val = tok
		rep = resp.ReplyOK
	}
	op.C.Complete(m.i, rep, nil)
	return true
}

func (m *modelMaster) drain(tok string) {
	for m.step(tok) {
	}
}

// TestLateUndoSparesASplitRetrysGrant: a split vote is retried
// while a master's reply to the first attempt is still outstanding (slow
// or paused master). That master then runs the first attempt, the retry
// (same token) and, last, the first attempt's undo, which its late reply
// queued behind the retry. If the retry's acquire answers yes on a key
// already holding its token (bsm-redislock obtain's re-obtain, rueidislock
// force), the retry counts that master as a yes and the undo then deletes
// the key: the client holds a lock present on fewer than a quorum.
func TestLateUndoSparesASplitRetrysGrant(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reobt bool
	}{
		{"SET NX (control)", false},
		{"re-obtain script (bsm obtain / rueidislock force)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const tok = "tokA"
			e, fps := pipedEngine(5, time.Millisecond)
			ms := make([]*modelMaster, 5)
			for i := range ms {
				ms[i] = &modelMaster{fp: fps[i], i: i, reobt: tc.reobt}
			}
			ms[2].val = "tokB" // another proxy's attempt, in a split vote
			w := NewWaiter()
			r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: 1, Key: "k",
				cmd:       resp.AppendCommand(nil, []byte("OBTAIN"), []byte("k"), []byte(tok)),
				undoKeys:  [][]byte{[]byte("k")},
				undoToken: []byte(tok), undoOp: UndoDelIfValue, token: []byte(tok),
				TTL: 10 * time.Second, noRk: rkNil, t0: batching.Now()}
			if tc.reobt {
				r.noIsNoop = true
			} else {
				r.exclusive, r.nilIsNoop = true, true
			}
			e.Submit(w, r)
			ms[0].step(tok) // OK
			ms[1].step(tok) // OK
			ms[2].step(tok) // nil: tokB
			// Masters 3 and 4 are paused: node_timeout passes.
			r.expire()
			if r.Decided() {
				t.Fatal("split vote published instead of retried")
			}
			ms[2].val = "" // the other proxy undoes its minority
			deadline := time.Now().Add(5 * time.Second)
			// The retry is not sent to the paused masters (their part of
			// the first attempt is unknown); it reaches master 0 behind
			// the undo.
			for len(fps[0].sent()) < 3 {
				if time.Now().After(deadline) {
					t.Fatal("no retry")
				}
				time.Sleep(time.Millisecond)
			}
			// The paused masters resume: the first attempt, then the undo
			// that its late reply queued.
			ms[3].drain(tok)
			ms[4].drain(tok)
			ms[0].drain(tok) // undo, then the retry
			done := make(chan struct{})
			go func() { e.Wait(w); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("no decision")
			}
			// Meanwhile another client's attempt (tokD, from another proxy)
			// reached masters 1 and 2 before the retry did.
			ms[1].step(tok) // the first attempt's undo
			ms[1].val, ms[2].val = "tokD", "tokD"
			for _, m := range ms {
				m.drain(tok)
			}
			holders := 0
			for _, m := range ms {
				if m.val == tok {
					holders++
				}
			}
			t.Logf("client got %v %v; token on %d masters", r.reply, r.err, holders)
			if r.err == nil && r.reply.IsOK() && holders < e.Q() {
				t.Fatalf("client was granted the lock, but after the queued commands ran its token is on %d masters (< quorum %d): a stranger can win the key", holders, e.Q())
			}
		})
	}
}

// commandArgs splits an encoded command into its arguments.
func commandArgs(cmd []byte) []string {
	r, _, err := resp.Parse(cmd)
	if err != nil || r.Type != resp.Array {
		panic("not a command: " + string(cmd))
	}
	args := make([]string, len(r.Elems))
	for i, e := range r.Elems {
		args[i] = string(e.Str)
	}
	return args
}

// modelStep2 runs master m's next op against a store that understands
// SET NX, a release ("REL", compare-and-delete, :1/:0) and the undo.
func (m *modelMaster) step2() bool {
	op, ok := m.fp.next(&m.ran)
	if !ok {
		return false
	}
	args := commandArgs(op.Cmd)
	switch {
	case bytes.Contains(op.Cmd, []byte(undoScript.SHA1)):
		if m.val == args[len(args)-1] {
			m.val = ""
		}
	case args[0] == "REL":
		rep := resp.Reply{Type: resp.Integer}
		if m.val == args[2] {
			m.val, rep.Int = "", 1
		}
		op.C.Complete(m.i, rep, nil)
	case args[0] == "SET":
		rep := resp.ReplyNil
		if m.val == "" {
			m.val, rep = args[2], resp.ReplyOK
		}
		op.C.Complete(m.i, rep, nil)
	}
	return true
}

// TestLateUndoSparesALaterGrantOfTheSameToken: the undo of a failed
// acquisition whose master was slow is queued when that master's late
// reply arrives, i.e. behind every command written to it meanwhile. A
// client that uses a fixed token (hostname, pid: common in hand-written
// SET NX code) fails once, retries, works, releases and acquires again,
// all while one master is paused. When it resumes, it runs the whole
// backlog; the first attempt's undo comes last and deletes the latest
// grant's key, which that grant counted as a yes.
func TestLateUndoSparesALaterGrantOfTheSameToken(t *testing.T) {
	const tok = "host-1"
	e, fps := pipedEngine(5, -1) // no split-vote retry: this is not about it
	ms := make([]*modelMaster, 5)
	for i := range ms {
		ms[i] = &modelMaster{fp: fps[i], i: i}
	}
	ms[1].val, ms[2].val, ms[3].val = "B", "B", "B" // another client holds k (B's lock is on 3 masters)
	settle := func(r *Request, w *Waiter) {
		t.Helper()
		if !r.Decided() {
			r.expire() // master 4 is paused: node_timeout passes
		}
		e.Wait(w)
	}
	// P1: refused (B holds k); master 4 paused.
	p1, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		for ms[i].step2() {
		}
	}
	settle(p1, w)
	if p1.reply.Type != resp.Nil {
		t.Fatalf("P1: %v %v", p1.reply, p1.err)
	}
	ms[1].val, ms[2].val, ms[3].val = "", "", "" // B released
	// P2: the client's retry works on masters 0-3.
	p2, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		for ms[i].step2() {
		}
	}
	settle(p2, w)
	if !p2.reply.IsOK() {
		t.Fatalf("P2: %v %v", p2.reply, p2.err)
	}
	// R: the client releases.
	w = NewWaiter()
	rel := &Request{kind: Release, agg: AggVote, rule: &YesOne, nkeys: 1, Key: "k",
		cmd:  resp.AppendCommand(nil, []byte("REL"), []byte("k"), []byte(tok)),
		noRk: rkZero, t0: batching.Now()}
	e.Submit(w, rel)
	for i := 0; i < 4; i++ {
		for ms[i].step2() {
		}
	}
	settle(rel, w)
	// Another client C (through another proxy) wins masters 1 and 2 first.
	ms[1].val, ms[2].val = "C", "C"
	// P3: the client acquires again. Master 4 resumes meanwhile and runs its
	// backlog: P1 (writes), P2 (nil), R (deletes), P3 (writes: yes, in time),
	// and P1's undo, queued by P1's late reply behind all of them.
	p3, w := setNX(e, "k", tok)
	for ms[4].step2() {
	}
	for _, i := range []int{0, 3, 1, 2} {
		for ms[i].step2() {
		}
	}
	settle(p3, w)
	for _, m := range ms {
		for m.step2() {
		}
	}
	ms[1].val, ms[2].val = "", "" // C's proxy undoes its minority
	holders := 0
	for _, m := range ms {
		if m.val == tok {
			holders++
		}
	}
	t.Logf("P3: %v %v; token on %d masters", p3.reply, p3.err, holders)
	if p3.reply.IsOK() && holders < e.Q() {
		t.Fatalf("P3 was granted, but P1's late undo deleted its key on the resumed master: token on %d masters (< quorum %d), a stranger can win k", holders, e.Q())
	}
}

// TestUnsentIsNotUnconfirmed: a command the pipeline refused (master
// down) never reached the master, yet it is recorded as "lost" and counted
// as an unconfirmed undo, which UndoStats documents as "the connection
// broke before the reply". With one master down, every failed acquisition
// adds one: the metric no longer tells an operator anything.
func TestUnsentIsNotUnconfirmed(t *testing.T) {
	e, fps := pipedEngine(5, -1)
	// A plain error, as Pipeline.Submit returns for a master that is down.
	e.pipes[4] = pipeFunc(func(batching.Op) error { return &batching.MasterError{Addr: "m4:1", Err: errPlainDown} })
	r, _ := setNX(e, "k", "tok")
	for i := 0; i < 4; i++ {
		answer(fps, i, resp.ReplyNil, nil)
	}
	if !r.Decided() || r.reply.Type != resp.Nil {
		t.Fatalf("got %v %v", r.reply, r.err)
	}
	if _, _, unconfirmed := e.UndoStats(); unconfirmed != 0 {
		t.Fatalf("unconfirmed = %d for a command that was never sent", unconfirmed)
	}
}

type pipeFunc func(batching.Op) error

func (f pipeFunc) Submit(op batching.Op) error { return f(op) }
func (pipeFunc) Up() (bool, error)             { return false, errPlainDown }
func (pipeFunc) Depth() (queued, inflight int) { return 0, 0 }
func (pipeFunc) Stalled(int64) time.Duration   { return 0 }
func (pipeFunc) Addr() string                  { return "m4:1" }
func (pipeFunc) Close()                        {}

var errPlainDown = errorString("down (connection refused); redialling")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestLateUndoAfterARelease: a release of the key written to a slow master
// after a failed acquisition's write there does not cancel that
// acquisition's late undo. It used to (a release's token is unknown to the
// engine, so it was taken for a write of any token): the token then stayed
// on the late master until its TTL, counted unconfirmed, and refused every
// other client there — with three proxies contending, left-over tokens
// made most refusals while the lock was free (bench -only multiproxy).
func TestLateUndoAfterARelease(t *testing.T) {
	const tok = "tokA"
	e, fps := pipedEngine(5, -1)
	ms := make([]*modelMaster, 5)
	for i := range ms {
		ms[i] = &modelMaster{fp: fps[i], i: i}
	}
	ms[1].val, ms[2].val, ms[3].val = "B", "B", "B" // B holds k on a quorum
	// A's SET NX: refused on 1-3, yes on 0, master 4 paused.
	p1, w := setNX(e, "k", tok)
	for i := 0; i < 4; i++ {
		for ms[i].step2() {
		}
	}
	if !p1.Decided() {
		p1.expire()
	}
	e.Wait(w)
	if p1.reply.Type != resp.Nil {
		t.Fatalf("A's SET NX: %v %v", p1.reply, p1.err)
	}
	// B releases through this proxy; the release is queued to master 4 too.
	w = NewWaiter()
	rel := &Request{kind: Release, agg: AggVote, rule: &YesOne, nkeys: 1, Key: "k",
		cmd:  resp.AppendCommand(nil, []byte("REL"), []byte("k"), []byte("B")),
		noRk: rkZero, t0: batching.Now()}
	e.Submit(w, rel)
	for i := 0; i < 4; i++ {
		for ms[i].step2() {
		}
	}
	if !rel.Decided() {
		rel.expire()
	}
	e.Wait(w)
	// Master 4 resumes: A's SET NX writes tokA (its late yes), B's release
	// finds tokA and leaves it; A's late undo must then delete it.
	for ms[4].step2() {
	}
	for ms[4].step2() { // the undo, queued by the late reply
	}
	if ms[4].val == tok {
		sent, lost, unconfirmed := e.UndoStats()
		t.Fatalf("A's token left on the late master after B's release (undos sent %d, lost %d, unconfirmed %d): it refuses every other client there until its TTL", sent, lost, unconfirmed)
	}
	if ms[0].val == tok {
		t.Fatalf("A's token left on master 0 (its undo at the decision)")
	}
}

// TestLateUndoAfterOwnRefusedRetry: a client retries its refused SET NX
// with the same token (as lock libraries do) while a master is paused.
// When that master resumes it runs the first attempt (writes the token)
// and the retry (nil: the key is there). The first attempt's late undo
// must then be sent: the token there is its own. It used to be dropped
// (the retry had marked it superseded), leaving the token on that master
// until its TTL, where it refused every attempt, the client's own
// included; with three proxies such left-overs locked a key for seconds.
func TestLateUndoAfterOwnRefusedRetry(t *testing.T) {
	const tok = "tokA"
	e, fps := pipedEngine(5, -1)
	ms := make([]*modelMaster, 5)
	for i := range ms {
		ms[i] = &modelMaster{fp: fps[i], i: i}
	}
	ms[1].val, ms[2].val, ms[3].val = "B", "B", "B"
	attempt := func() *Request {
		p, w := setNX(e, "k", tok)
		for i := 0; i < 4; i++ { // master 4 is paused
			for ms[i].step2() {
			}
		}
		if !p.Decided() {
			p.expire()
		}
		e.Wait(w)
		for i := 0; i < 4; i++ { // the undos at the decision
			for ms[i].step2() {
			}
		}
		if p.reply.Type != resp.Nil {
			t.Fatalf("attempt: %v %v", p.reply, p.err)
		}
		return p
	}
	attempt()
	attempt()           // the retry, same token
	for ms[4].step2() { // resumes: tokA written, nil, then the undo
	}
	if ms[4].val == tok {
		_, _, unconfirmed := e.UndoStats()
		t.Fatalf("the first attempt's token left on the resumed master (unconfirmed %d): the retry wrote nothing there, so the undo was due", unconfirmed)
	}
	if _, _, unconfirmed := e.UndoStats(); unconfirmed != 0 {
		t.Fatalf("unconfirmed = %d, want 0", unconfirmed)
	}
}
