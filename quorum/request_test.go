package quorum

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
)

func TestSize(t *testing.T) {
	want := map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4, 8: 5, 9: 5}
	for n, q := range want {
		if got := Size(n); got != q {
			t.Errorf("Size(%d) = %d, want %d", n, got, q)
		}
	}
}

func TestValidityArithmetic(t *testing.T) {
	// ttl 10s, factor 0.01: drift = 100ms + 2ms.
	if d := Drift(10*time.Second, 0.01); d != 102*time.Millisecond {
		t.Fatalf("Drift = %v, want 102ms", d)
	}
	if v := Validity(10*time.Second, 3*time.Millisecond, 0.01); v != 10*time.Second-105*time.Millisecond {
		t.Fatalf("Validity = %v", v)
	}
	// A TTL shorter than its drift is never valid.
	if v := Validity(2*time.Millisecond, 0, 0.01); v > 0 {
		t.Fatalf("2ms TTL has validity %v, want <= 0", v)
	}
}

func TestTTLFrom(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	cases := []struct {
		v    int64
		u    TTLUnit
		want time.Duration
	}{
		{1500, Millis, 1500 * time.Millisecond},
		{3, Seconds, 3 * time.Second},
		{1_002_000, UnixMillis, 2 * time.Second},
		{1_003, UnixSecs, 3 * time.Second},
		{999_000, UnixMillis, -time.Second},
	}
	for _, c := range cases {
		if got := TTLFrom(c.v, c.u, now); got != c.want {
			t.Errorf("TTLFrom(%d, %d) = %v, want %v", c.v, c.u, got, c.want)
		}
	}
}

// fakeEngine is an engine without masters: the test plays the masters by
// calling Complete.
func fakeEngine(n int) *Engine {
	cfg := Config{Masters: make([]string, n), NodeTimeout: 50 * time.Millisecond, MaxTTL: time.Minute, DriftFactor: 0.01}
	for i := range cfg.Masters {
		cfg.Masters[i] = "m" + string(rune('0'+i)) + ":1"
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	e := &Engine{cfg: cfg, n: n, q: Size(n)}
	e.keys.init()
	e.slots.init(e.keys.seed)
	e.loads.init(n, MaxUnderstoodPerMaster)
	e.timers, _ = newDeadlines(nil)
	e.pipes = nil
	e.quarantine = make([]atomic.Int64, n)
	e.qwhy = make([]atomic.Uint32, n)
	e.barred = make([]atomic.Uint32, n)
	e.policies = make([]atomic.Pointer[string], n)
	e.checkErrs = make([]atomic.Pointer[string], n)
	return e
}

func acquireReq(e *Engine) (*Request, *Waiter) {
	w := NewWaiter()
	r := &Request{kind: Acquire, agg: AggVote, rule: &YesOK, nkeys: 1, TTL: 10 * time.Second,
		noRk: rkNil, nilIsNoop: true, t0: batching.Now()}
	r.e, r.w = e, w
	w.pending.Add(1)
	return r, w
}

var down = errors.New("connection refused")

func TestVoteEarlyDecision(t *testing.T) {
	for n := 1; n <= MaxMasters; n++ {
		e := fakeEngine(n)
		q := Size(n)
		// Yes from exactly q masters decides success before the others.
		r, _ := acquireReq(e)
		for i := 0; i < q; i++ {
			if r.Decided() {
				t.Fatalf("n=%d: decided after %d yes, quorum %d", n, i, q)
			}
			r.Complete(i, resp.ReplyOK, nil)
		}
		if !r.Decided() || r.err != nil || !r.reply.IsOK() || r.validity <= 0 {
			t.Fatalf("n=%d: after %d yes: decided=%v err=%v reply=%v validity=%v", n, q, r.Decided(), r.err, r.reply, r.validity)
		}
		// Contention: once n-q+1 masters said nil, q yes is impossible
		// and at least q answered (when n-q+1 >= q), so nil at once.
		r, _ = acquireReq(e)
		no := n - q + 1
		for i := 0; i < no; i++ {
			r.Complete(i, resp.ReplyNil, nil)
		}
		if no >= q {
			if !r.Decided() || r.err != nil || r.reply.Type != resp.Nil {
				t.Fatalf("n=%d: after %d nil: decided=%v err=%v reply=%v", n, no, r.Decided(), r.err, r.reply)
			}
		} else if r.Decided() {
			// Fewer than q answered: it waits to tell NOQUORUM from
			// contention.
			t.Fatalf("n=%d: decided with only %d answers", n, no)
		}
	}
}

func TestVoteNoQuorum(t *testing.T) {
	e := fakeEngine(5)
	r, _ := acquireReq(e)
	r.Complete(0, resp.ReplyOK, nil)
	r.Complete(1, resp.ReplyOK, nil)
	r.Complete(2, resp.Reply{}, down)
	r.Complete(3, resp.Reply{}, down)
	if r.Decided() {
		t.Fatal("2 yes + 1 outstanding can still make 3: must wait")
	}
	r.Complete(4, resp.Reply{}, down)
	if !r.Decided() {
		t.Fatal("every master accounted for: must decide")
	}
	var nq *NoQuorumError
	if !errors.As(r.err, &nq) || nq.Answered != 2 || nq.N != 5 || nq.Q != 3 {
		t.Fatalf("want NOQUORUM 2 of 5, got %v", r.err)
	}
	if got := r.err.Error(); !strings.HasPrefix(got, "NOQUORUM 2 of 5 masters answered, 3 needed (master m2:1: connection refused;") {
		t.Fatalf("message %q", got)
	}
}

func TestVoteWaitsWhileQuorumStillPossible(t *testing.T) {
	e := fakeEngine(5)
	r, _ := acquireReq(e)
	r.Complete(0, resp.ReplyOK, nil)
	r.Complete(1, resp.Reply{}, down)
	r.Complete(2, resp.ReplyOK, nil)
	if r.Decided() {
		t.Fatal("decided with 2 yes and 2 outstanding")
	}
	r.expire() // node_timeout passes
	if !r.Decided() || r.err == nil {
		t.Fatalf("expired with 2 of 5 answered: want NOQUORUM, got reply=%v err=%v", r.reply, r.err)
	}
}

func TestValidityExpiredFails(t *testing.T) {
	e := fakeEngine(3)
	r, _ := acquireReq(e)
	r.TTL = 5 * time.Millisecond
	r.t0 = batching.Now() - int64(10*time.Millisecond) // parsed 10ms ago
	r.Complete(0, resp.ReplyOK, nil)
	r.Complete(1, resp.ReplyOK, nil)
	if !r.Decided() || r.reply.Type != resp.Nil || r.err != nil {
		t.Fatalf("quorum yes after validity ran out must be 'not acquired': reply=%v err=%v", r.reply, r.err)
	}
}

func TestMostCommonNoReply(t *testing.T) {
	e := fakeEngine(5)
	w := NewWaiter()
	r := &Request{kind: Release, agg: AggVote, rule: &YesOne, nkeys: 1, noRk: rkZero}
	r.e, r.w = e, w
	w.pending.Add(1)
	minus1 := resp.Reply{Type: resp.Integer, Int: -1}
	zero := resp.Reply{Type: resp.Integer, Int: 0}
	r.Complete(0, minus1, nil)
	r.Complete(1, zero, nil)
	r.Complete(2, minus1, nil)
	if !r.Decided() || !r.reply.Equal(minus1) {
		t.Fatalf("want the most common no reply -1, got %v (decided %v)", r.reply, r.Decided())
	}
}

func TestQthTTL(t *testing.T) {
	e := fakeEngine(5)
	w := NewWaiter()
	// Parsed 300ms ago: every reading has aged at least that much.
	r := &Request{kind: Read, agg: AggValueTTL, nkeys: 1, t0: batching.Now() - int64(300*time.Millisecond)}
	r.e, r.w = e, w
	w.pending.Add(1)
	pair := func(v string, ttl int64) resp.Reply {
		return resp.Reply{Type: resp.Array, Elems: []resp.Reply{{Type: resp.Bulk, Str: []byte(v)}, {Type: resp.Integer, Int: ttl}}}
	}
	r.Complete(0, pair("tok", 9000), nil)
	r.Complete(1, pair("other", 9999), nil)
	r.Complete(2, pair("tok", 8000), nil)
	if r.Decided() {
		t.Fatal("decided before a quorum held one value")
	}
	r.Complete(3, pair("tok", 10000), nil)
	if !r.Decided() {
		t.Fatal("3 of 5 hold tok: should decide")
	}
	// Q-th (3rd) largest among holders: 8000, minus drift 80ms+2ms and
	// the 300ms (and a little more) since the command was parsed.
	if want := int64(8000 - 82 - 300); r.reply.Int > want || r.reply.Int < want-200 {
		t.Fatalf("PTTL = %d, want %d or a little less", r.reply.Int, want)
	}
}

func TestKeysOutcome(t *testing.T) {
	e := fakeEngine(3)
	w := NewWaiter()
	r := &Request{kind: Read, agg: AggKeys, nkeys: 2}
	r.e, r.w = e, w
	w.pending.Add(1)
	arr := func(a, b int64) resp.Reply {
		return resp.Reply{Type: resp.Array, Elems: []resp.Reply{{Type: resp.Integer, Int: a}, {Type: resp.Integer, Int: b}}}
	}
	r.Complete(0, arr(1, 0), nil)
	r.Complete(1, arr(1, 1), nil)
	r.Complete(2, arr(0, 0), nil)
	if !r.Decided() || r.reply.Int != 1 {
		t.Fatalf("keys held by a quorum = %v, want 1", r.reply)
	}
}

func TestUnavailableErrorsAreNotVotes(t *testing.T) {
	e := fakeEngine(3)
	r, _ := acquireReq(e)
	loading := resp.Reply{Type: resp.Error, Str: []byte("LOADING Redis is loading the dataset in memory")}
	r.Complete(0, loading, nil)
	r.Complete(1, loading, nil)
	if !r.Decided() {
		t.Fatal("2 of 3 unavailable: should decide")
	}
	if r.err == nil {
		t.Fatalf("LOADING masters must make NOQUORUM, got reply %v", r.reply)
	}
}

func TestKeySerialization(t *testing.T) {
	var kt keyTable
	kt.init()
	a := &Request{Key: "k"}
	b := &Request{Key: "k"}
	c := &Request{Key: "k"}
	if !kt.enterKey(a) || kt.enterKey(b) || kt.enterKey(c) {
		t.Fatal("only the first request on a key runs")
	}
	if kt.leaveKey("k") != b || kt.leaveKey("k") != c || kt.leaveKey("k") != nil {
		t.Fatal("waiters must run in FIFO order")
	}
	if !kt.enterKey(&Request{Key: "k"}) {
		t.Fatal("key should be free again")
	}
}

func TestKeyQueueReleasesGoFirst(t *testing.T) {
	var kt keyTable
	kt.init()
	w1, w2, w3 := NewWaiter(), NewWaiter(), NewWaiter()
	run := &Request{Key: "k", exclusive: true, w: w1}
	a1 := &Request{Key: "k", exclusive: true, w: w2}
	a2 := &Request{Key: "k", exclusive: true, w: w3}
	rel := &Request{Key: "k", w: w1}
	ext := &Request{Key: "k", w: w1}
	// w3's own release stays behind w3's earlier SET NX: one connection's
	// commands keep their order.
	rel3 := &Request{Key: "k", w: w3}
	kt.enterKey(run)
	kt.enterKey(a1)
	kt.enterKey(a2)
	kt.enterKey(rel)
	kt.enterKey(ext)
	kt.enterKey(rel3)
	for i, want := range []*Request{rel, ext, a1, a2, rel3, nil} {
		if got := kt.leaveKey("k"); got != want {
			t.Fatalf("leave #%d: got %p, want %p", i, got, want)
		}
	}
}

// TestKeyTableOwnsItsKeys: a request's Key aliases its command buffer,
// which is recycled with the request while the key can stay busy with the
// requests queued behind it. The table must keep its own copy.
func TestKeyTableOwnsItsKeys(t *testing.T) {
	var kt keyTable
	kt.init()
	bufA, bufB := []byte("lock:1"), []byte("lock:1")
	alias := func(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
	a := &Request{Key: alias(bufA), exclusive: true}
	b := &Request{Key: alias(bufB), exclusive: true}
	if !kt.enterKey(a) || kt.enterKey(b) {
		t.Fatal("a runs, b waits")
	}
	if kt.leaveKey(a.Key) != b {
		t.Fatal("b runs after a")
	}
	copy(bufA, "zzzz:9") // a is recycled for another key
	if kt.enterKey(&Request{Key: "zzzz:9", exclusive: true}) != true {
		t.Fatal("a key nobody holds must be free")
	}
	if kt.enterKey(&Request{Key: "lock:1", exclusive: true}) {
		t.Fatal("lock:1 is still busy with b: a new request must wait")
	}
	for range 2 {
		kt.leaveKey(b.Key)
	}
	if !kt.enterKey(&Request{Key: "lock:1"}) {
		t.Fatal("lock:1 should be free once its queue is done")
	}
	// Freed queues are reused for other keys.
	kt.leaveKey("lock:1")
	kt.leaveKey("zzzz:9")
	if !kt.enterKey(&Request{Key: "other"}) || kt.enterKey(&Request{Key: "other"}) {
		t.Fatal("a reused queue must serve its new key")
	}
}
