package quorum

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// keysMaster is a master with several keys for the late-undo tests over
// several keys, stepped by hand. It runs SET NX ("SET k tok NX PX ms"), an
// all-or-nothing acquisition of several keys ("MSET k1 k2 … tok": OK when
// all are free, else nil), a token extend of one key ("EXT k tok") or of
// several ("MEXT k1 k2 … tok": 1 when every key holds tok), a
// compare-and-delete release ("REL k tok") and the undo script
// (compare-and-delete of each key). ext records the keys extended.
type keysMaster struct {
	fp   *fakePipe
	i    int
	vals map[string]string
	ext  map[string]bool
	ran  int
}

func (m *keysMaster) step() bool {
	op, ok := m.fp.next(&m.ran)
	if !ok {
		return false
	}
	args := commandArgs(op.Cmd)
	var rep resp.Reply
	switch args[0] {
	case "EVALSHA":
		if args[1] != undoScript.SHA1 {
			panic("model: unknown script")
		}
		n, _ := strconv.Atoi(args[2])
		tok := args[3+n]
		for _, k := range args[3 : 3+n] {
			if m.vals[k] == tok {
				delete(m.vals, k)
				delete(m.ext, k)
			}
		}
		return true // fire and forget
	case "SET":
		rep = resp.ReplyNil
		if m.vals[args[1]] == "" {
			m.vals[args[1]], m.ext[args[1]], rep = args[2], false, resp.ReplyOK
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
				m.vals[k], m.ext[k] = tok, false
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
		if rep.Int == 1 {
			for _, k := range keys {
				m.ext[k] = true
			}
		}
	case "REL":
		rep = resp.Reply{Type: resp.Integer}
		if m.vals[args[1]] == args[2] {
			delete(m.vals, args[1])
			delete(m.ext, args[1])
			rep.Int = 1
		}
	default:
		panic("model: unknown command " + args[0])
	}
	op.C.Complete(m.i, rep, nil)
	return true
}

// eachSlot calls f with every late-undo slot of e, the multi slot
// included, each under its lock.
func eachSlot(e *Engine, f func(*keySlot)) {
	for i := 0; i <= len(e.slots.s); i++ {
		s := &e.slots.multi
		if i < len(e.slots.s) {
			s = &e.slots.s[i]
		}
		s.mu.Lock()
		f(s)
		s.mu.Unlock()
	}
}

func (m *keysMaster) drain() {
	for m.step() {
	}
}

// multiSetNX submits an acquisition of keys, all or nothing, as the proxy
// does for an understood multi-key acquire script.
func multiSetNX(e *Engine, tok string, keys ...string) (*Request, *Waiter) {
	w := NewWaiter()
	args := [][]byte{[]byte("MSET")}
	var undo [][]byte
	for _, k := range keys {
		args = append(args, []byte(k))
		undo = append(undo, []byte(k))
	}
	args = append(args, []byte(tok))
	r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: len(keys),
		cmd: resp.AppendCommand(nil, args...), undoKeys: undo,
		undoToken: []byte(tok), undoOp: UndoDelIfValue, token: []byte(tok),
		nilIsNoop: true, TTL: 10 * time.Second, noRk: rkNil, t0: batching.Now()}
	e.Submit(w, r)
	return r, w
}

// extend submits a token extend of keys: EXT for one key (keyed, as the
// proxy's single-key scripts), MEXT for several (no single lock key).
func extend(e *Engine, tok string, keys ...string) (*Request, *Waiter) {
	w := NewWaiter()
	name := "EXT"
	if len(keys) > 1 {
		name = "MEXT"
	}
	args := [][]byte{[]byte(name)}
	for _, k := range keys {
		args = append(args, []byte(k))
	}
	args = append(args, []byte(tok))
	r := &Request{kind: Extend, agg: AggVote, rule: &YesOne, nkeys: len(keys),
		cmd: resp.AppendCommand(nil, args...), token: []byte(tok), TTL: 10 * time.Second,
		noRk: rkZero, t0: batching.Now()}
	if len(keys) == 1 {
		r.Key = keys[0]
	} else {
		c := r.coldOf() // before Submit
		for i := range keys {
			c.keys = append(c.keys, argIn(r.cmd, 1+i))
		}
	}
	e.Submit(w, r)
	return r, w
}

// TestLateUndoAcrossKeys: the late undo of a failed acquisition must be
// held back by a later extension of its token that counted the slow
// master, whatever keys the two name: an acquisition over several keys
// followed by an extension of all of them or of one, and a single-key
// acquisition followed by an extension over several keys that includes
// it. Master 4 is paused while the first attempt fails; the retry is
// granted on 0-3; master 4 then resumes and runs the attempt (writes the
// token), the retry (nil) and the extension (1, counted); masters 0 and 1
// are slow for the extension and their copies expire. If the attempt's
// late undo then deletes the token on master 4, the extended lock is left
// on 2 and 3 only, and a stranger can take it. Before the late-undo record
// knew requests over several keys, every case failed but the extension of
// the attempt's first key (it was registered under that key alone).
func TestLateUndoAcrossKeys(t *testing.T) {
	const tok = "tokA"
	for _, tc := range []struct {
		name     string
		attempt  []string // the failed attempt's keys (SET NX for one, MSET for several)
		extended []string // the extension's keys
	}{
		{"MSET A B, then MEXT A B", []string{"A", "B"}, []string{"A", "B"}},
		{"MSET A B, then EXT B", []string{"A", "B"}, []string{"B"}},
		{"MSET A B, then EXT A", []string{"A", "B"}, []string{"A"}},
		{"SET A, then MEXT B A", []string{"A"}, []string{"B", "A"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, fps := pipedEngine(5, -1)
			e.cfg.NodeTimeout = time.Minute
			ms := make([]*keysMaster, 5)
			for i := range ms {
				ms[i] = &keysMaster{fp: fps[i], i: i, vals: map[string]string{}, ext: map[string]bool{}}
			}
			acquire := func() (*Request, *Waiter) {
				if len(tc.attempt) == 1 {
					return setNX(e, tc.attempt[0], tok)
				}
				return multiSetNX(e, tok, tc.attempt...)
			}
			// Another holder's copies on 1-3 refuse the attempt; master
			// 4 is paused.
			for i := 1; i <= 3; i++ {
				ms[i].vals[tc.attempt[0]] = "X"
			}
			p1, w := acquire()
			for i := 0; i < 4; i++ {
				ms[i].drain()
			}
			e.Wait(w)
			if p1.reply.Type != resp.Nil {
				t.Fatalf("attempt: %v %v, want refused", p1.reply, p1.err)
			}
			for i := 0; i < 4; i++ { // its undo on master 0
				ms[i].drain()
			}
			for i := 1; i <= 3; i++ {
				delete(ms[i].vals, tc.attempt[0]) // the other holder released
			}
			// The retry with the same token, granted on 0-3.
			p2, w := acquire()
			for i := 0; i < 4; i++ {
				ms[i].drain()
			}
			e.Wait(w)
			if !p2.reply.IsOK() {
				t.Fatalf("retry: %v %v", p2.reply, p2.err)
			}
			for _, k := range tc.extended { // the client's other keys, same token
				for i := 0; i < 5; i++ {
					if ms[i].vals[k] == "" && !contains(tc.attempt, k) {
						ms[i].vals[k] = tok
					}
				}
			}
			ext, w := extend(e, tok, tc.extended...)
			// Master 4 resumes; 2 and 3 answer the extension; 0 and 1 are
			// slow.
			ms[4].drain()
			ms[2].drain()
			ms[3].drain()
			e.Wait(w)
			if ext.err != nil || ext.reply.Int != 1 {
				t.Fatalf("extension not granted (%v %v)", ext.reply, ext.err)
			}
			ms[4].drain() // the late undo, if it was sent
			for i := 0; i <= 1; i++ {
				ms[i].vals, ms[i].ext = map[string]string{}, map[string]bool{} // expired
				ms[i].drain()
			}
			for _, k := range tc.extended {
				holders := 0
				for _, m := range ms {
					if m.vals[k] == tok && m.ext[k] {
						holders++
					}
				}
				if holders < e.Q() {
					t.Fatalf("the extension of %s was granted counting master 4, then the failed attempt's late undo deleted it there: the extended lock is on %d masters (< quorum %d)", k, holders, e.Q())
				}
			}
		})
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// TestScriptKeysForSupersede: a script over several KEYS with no single
// lock key carries all its keys for the late-undo record when it may write
// or count a lock (acquire, extend), and none otherwise.
func TestScriptKeysForSupersede(t *testing.T) {
	e := fakeEngine(5)
	keys := [][]byte{[]byte("A"), []byte("B")}
	argv := [][]byte{[]byte("tok"), []byte("10000")}
	for _, tc := range []struct {
		kind Kind
		key  Arg
		want int
	}{
		{Extend, Arg{}, 2},
		{Acquire, Arg{}, 2},
		{Release, Arg{}, 0},
		{Extend, Arg{Keys: true, Index: 1}, 0}, // a single lock key: keyed instead
	} {
		op := &ScriptOp{SHA1: "0123456789012345678901234567890123456789", Preloaded: true,
			Kind: tc.kind, Yes: YesOne, Token: Arg{Index: 1}, KeyArg: tc.key}
		r := e.Script(op, keys, argv, 10*time.Second, batching.Now())
		var got [][]byte
		if r.cold != nil {
			got = r.cold.keys
		}
		if len(got) != tc.want {
			t.Fatalf("kind %v, KeyArg %v: %d keys, want %d", tc.kind, tc.key, len(got), tc.want)
		}
		for i := range got {
			if string(got[i]) != string(keys[i]) {
				t.Fatalf("key %d: %q", i, got[i])
			}
		}
		if tc.want == 2 && r.multiKeys() == nil {
			t.Fatal("not seen as a request over several keys")
		}
	}
}
