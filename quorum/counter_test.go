package quorum_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

// The counters' max-register (counter.go) against real masters: values that
// differ between masters, masters down, paused and restarted empty, the
// repair that keeps a restarted master from making a counter go back, and
// the replies INCR gives where Redis would refuse.

// run submits r and waits for its outcome.
func run(e *quorum.Engine, r *quorum.Request) (resp.Reply, error) {
	w := quorum.NewWaiter()
	e.Submit(w, r)
	e.Wait(w)
	return r.Result()
}

func incr(t *testing.T, e *quorum.Engine, key string, by int64) int64 {
	t.Helper()
	rep, err := run(e, e.Incr([]byte(key), by, batching.Now()))
	if err != nil || rep.Type != resp.Integer {
		t.Fatalf("INCRBY %s %d: %v %v", key, by, rep, err)
	}
	return rep.Int
}

// setAll runs args on every master in ms.
func setAll(t *testing.T, ms []*redisproc.Server, args ...string) {
	t.Helper()
	for _, m := range ms {
		if _, err := m.Do(args...); err != nil {
			t.Fatalf("%v on %s: %v", args, m.Addr, err)
		}
	}
}

// pollValues waits until every master in ms holds at least min in key.
func pollValues(t *testing.T, ms []*redisproc.Server, key string, min int64) {
	t.Helper()
	poll(t, key+" >= "+strconv.FormatInt(min, 10)+" on every master", func() bool {
		for _, m := range ms {
			v, _ := m.Do("GET", key)
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < min {
				return false
			}
		}
		return true
	})
}

func TestCounterMaxOverMasters(t *testing.T) {
	t.Parallel()
	ms := redisproc.ForTest(t, 5)
	// Every master is up and answers: no decision here waits for
	// node_timeout, which only decides whether slow replies count. The
	// package's 50 ms made INCR answer NOQUORUM with all five up when other
	// work held the machine's 2 cores (load 5 to 18); what this test checks
	// is the values, not how fast.
	e := startEngine(t, ms, bootstrap, func(c *quorum.Config) { c.NodeTimeout = time.Second })
	poll(t, "all masters voting", func() bool { return allVoting(e) })
	// 9 was acknowledged (a quorum holds it); master 3 missed it; master 4
	// holds 20, a write in flight when its writer died: never acknowledged.
	setAll(t, ms[:3], "SET", "c", "9")
	setAll(t, ms[3:4], "SET", "c", "4")
	setAll(t, ms[4:], "SET", "c", "20")
	first := incr(t, e, "c", 1)
	if first != 10 && first != 21 {
		t.Fatalf("INCR over 9, 9, 9, 4, 20 = %d, want 10 (a quorum without master 4) or 21", first)
	}
	pollValues(t, ms, "c", first) // the write goes to every master
	prev := first
	for i := 0; i < 20; i++ {
		v := incr(t, e, "c", 3)
		if v <= prev {
			t.Fatalf("INCRBY 3 after %d = %d: went back", prev, v)
		}
		prev = v
	}
	// GET answers the counter, written back first where a quorum does not
	// hold it yet.
	setAll(t, ms[:1], "SET", "c", strconv.FormatInt(prev+5, 10))
	rep, err := run(e, e.Get([]byte("c"), batching.Now()))
	if err != nil || rep.Type != resp.Bulk {
		t.Fatalf("GET c: %v %v", rep, err)
	}
	got, _ := strconv.ParseInt(string(rep.Str), 10, 64)
	if got != prev && got != prev+5 {
		t.Fatalf("GET c = %d, want %d or %d", got, prev, prev+5)
	}
	if v := incr(t, e, "c", 1); v <= got {
		t.Fatalf("INCR after GET %d = %d", got, v)
	}
}

func TestCounterMastersDownAndPaused(t *testing.T) {
	t.Parallel()
	ms := redisproc.ForTest(t, 5)
	e := startEngine(t, ms, bootstrap)
	poll(t, "all masters voting", func() bool { return allVoting(e) })
	prev := incr(t, e, "c", 1)
	ms[0].Kill()
	ms[1].Pause()
	for i := 0; i < 10; i++ {
		v := incr(t, e, "c", 1)
		if v <= prev {
			t.Fatalf("INCR after %d = %d with master 0 down, 1 paused", prev, v)
		}
		prev = v
	}
	ms[2].Pause()
	_, err := run(e, e.Incr([]byte("c"), 1, batching.Now()))
	var nq *quorum.NoQuorumError
	if !errors.As(err, &nq) {
		t.Fatalf("INCR with 2 of 5 masters: %v, want NOQUORUM", err)
	}
	ms[1].Resume()
	ms[2].Resume()
	// Master 1 gets the writes it missed (a counter's write is written
	// however late) and votes again.
	if v := incr(t, e, "c", 1); v <= prev {
		t.Fatalf("INCR after the pause = %d, after %d", v, prev)
	}
}

func TestCounterRefusals(t *testing.T) {
	t.Parallel()
	ms := redisproc.ForTest(t, 3)
	e := startEngine(t, ms, bootstrap)
	poll(t, "all masters voting", func() bool { return allVoting(e) })
	setAll(t, ms, "SET", "max", "9223372036854775807")
	setAll(t, ms, "SET", "big", "9223372036854775808")
	setAll(t, ms, "SET", "lock", "some-token", "PX", "60000")
	setAll(t, ms, "SET", "intlock", "12345", "PX", "60000")
	setAll(t, ms, "SET", "zeros", "007")
	setAll(t, ms, "HSET", "hash", "f", "1")
	for _, c := range []struct {
		key  string
		want quorum.CounterWhy
	}{
		{"max", quorum.Overflow},
		{"big", quorum.NotInteger},
		{"lock", quorum.NotInteger},
		{"intlock", quorum.HasExpiry},
		{"zeros", quorum.NotInteger},
	} {
		var ce *quorum.CounterError
		if rep, err := run(e, e.Incr([]byte(c.key), 1, batching.Now())); !errors.As(err, &ce) || ce.Why != c.want {
			t.Errorf("INCR %s: %v %v, want %v", c.key, rep, err, c.want)
		}
	}
	if rep, err := run(e, e.Incr([]byte("hash"), 1, batching.Now())); err != nil || rep.Type != resp.Error || !strings.HasPrefix(string(rep.Str), "WRONGTYPE") {
		t.Errorf("INCR of a hash: %v %v, want the masters' WRONGTYPE", rep, err)
	}
	if v := incr(t, e, "max", 0); v != 9223372036854775807 {
		t.Errorf("INCRBY max 0 = %d", v)
	}
	// A lock's value is never read as a counter by GET, even an integer
	// one: it has an expiry.
	setAll(t, ms[:1], "SET", "minority", "777", "PX", "60000")
	if rep, err := run(e, e.Get([]byte("minority"), batching.Now())); err != nil || rep.Type != resp.Nil {
		t.Errorf("GET of a lock token held by one master of 3: %v %v, want nil", rep, err)
	}
	if rep, err := run(e, e.Get([]byte("intlock"), batching.Now())); err != nil || string(rep.Str) != "12345" {
		t.Errorf("GET of a lock held by every master: %v %v", rep, err)
	}
}

// TestCounterRepairAfterRestart is the case the repair exists for: a value
// acknowledged by masters 0-2 only (3 and 4 missed its writes), master 0
// restarts empty, and after its quarantine masters 1 and 2 go down: the
// quorum left, 0, 3 and 4, must not answer less. The repair restored the
// counter on master 0 while it was quarantined; without it (the negative
// control) the counter goes back.
func TestCounterRepairAfterRestart(t *testing.T) {
	t.Parallel()
	for _, repair := range []bool{true, false} {
		t.Run(map[bool]string{true: "repaired", false: "negative control"}[repair], func(t *testing.T) {
			t.Parallel()
			ms := redisproc.ForTest(t, 5)
			e := startEngine(t, ms, bootstrap, func(c *quorum.Config) { c.MaxTTL = time.Second })
			quorum.SetCounterRepair(e, repair)
			poll(t, "all masters voting", func() bool { return allVoting(e) })
			if v := incr(t, e, "fence", 10); v != 10 {
				t.Fatalf("INCRBY 10 = %d", v)
			}
			pollValues(t, ms, "fence", 10)
			setAll(t, ms[3:], "SET", "fence", "5") // they missed the last writes
			ms[0].Kill()
			if err := ms[0].Restart(); err != nil {
				t.Fatal(err)
			}
			poll(t, "master 0 quarantined", func() bool { return !voting(e)[0] })
			poll(t, "master 0 voting again", func() bool { return voting(e)[0] && !e.Masters()[0].CountersPending })
			ms[1].Kill()
			ms[2].Kill()
			rep, err := run(e, e.Incr([]byte("fence"), 1, batching.Now()))
			switch {
			case repair && (err != nil || !rep.IsInt(11)):
				t.Fatalf("INCR over masters 0 (restarted, repaired), 3, 4 = %v %v, want 11", rep, err)
			case !repair && (err != nil || !rep.IsInt(6)):
				t.Fatalf("negative control: INCR without the repair = %v %v; want 6, the counter gone back", rep, err)
			}
		})
	}
}

// TestCounterRepairPendingDoesNotVote: until its counters are restored, a
// master that lost its data does not vote on them, whatever its lock
// quarantine says; the repair record on the master says so to every proxy.
func TestCounterRepairPendingDoesNotVote(t *testing.T) {
	t.Parallel()
	ms := redisproc.ForTest(t, 3)
	e := startEngine(t, ms, bootstrap)
	poll(t, "all masters voting", func() bool { return allVoting(e) })
	incr(t, e, "c", 1)
	// A pending record (a loss at time 1) that this master's repair
	// cannot complete: the record names a loss it did not see.
	rec := func(m *redisproc.Server) string {
		v, err := m.Do("EVAL", "redis.call('SELECT', ARGV[1]) return redis.call('GET', KEYS[1])", "1", quorum.RepairKey, strconv.Itoa(quorum.MarkerDB))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if _, err := ms[1].Do("EVAL", "redis.call('SELECT', ARGV[1]) redis.call('SET', KEYS[1], 'p:1') return 1", "1", quorum.RepairKey, strconv.Itoa(quorum.MarkerDB)); err != nil {
		t.Fatal(err)
	}
	// The next check sees it; the repair restores the counter and marks
	// it done.
	poll(t, "master 1's repair done", func() bool { return rec(ms[1]) == "d:1" && !e.Masters()[1].CountersPending })
	if v, _ := ms[1].Do("GET", "c"); v != "1" {
		t.Fatalf("master 1 holds %q after its repair, want 1", v)
	}
	if v, _ := ms[1].Do("EVAL", "redis.call('SELECT', ARGV[1]) return redis.call('SISMEMBER', KEYS[1], ARGV[2])", "1", quorum.RegistryKey, strconv.Itoa(quorum.MarkerDB), "c"); v != "1" {
		t.Fatalf("c in master 1's registry: %q", v)
	}
	// Masters 0 and 2 paused: master 1 alone cannot restore anything (it
	// reads from masters that vote on counters), so with a pending record
	// counters are NOQUORUM while locks still have 1 of 3.
	if _, err := ms[1].Do("EVAL", "redis.call('SELECT', ARGV[1]) redis.call('SET', KEYS[1], 'p:2') return 1", "1", quorum.RepairKey, strconv.Itoa(quorum.MarkerDB)); err != nil {
		t.Fatal(err)
	}
	ms[0].Pause()
	ms[2].Pause()
	defer ms[0].Resume()
	defer ms[2].Resume()
	poll(t, "master 1 pending", func() bool { return e.Masters()[1].CountersPending })
	_, err := run(e, e.Incr([]byte("c"), 1, batching.Now()))
	var nq *quorum.NoQuorumError
	if !errors.As(err, &nq) || !strings.Contains(nq.Error(), "counters are not restored") {
		t.Fatalf("INCR with the only answering master pending: %v", err)
	}
}

// TestCounterRestoredMasterVotesDuringItsQuarantine: once its counters are
// restored, a restarted master votes on them while its quarantine still
// keeps it from voting on locks (which wait for lost locks to expire).
// Without that, restarts of two masters a few hundred ms apart would leave
// too few counter voters to restore anything.
func TestCounterRestoredMasterVotesDuringItsQuarantine(t *testing.T) {
	t.Parallel()
	ms := redisproc.ForTest(t, 3)
	e := startEngine(t, ms, bootstrap, func(c *quorum.Config) { c.MaxTTL = time.Minute })
	poll(t, "all masters voting", func() bool { return allVoting(e) })
	prev := incr(t, e, "c", 7)
	ms[0].Kill()
	if err := ms[0].Restart(); err != nil {
		t.Fatal(err)
	}
	poll(t, "master 0 restored, still quarantined", func() bool {
		m := e.Masters()[0]
		return !m.QuarantinedUntil.IsZero() && m.QuarantineWhy == quorum.WhyRestarted && !m.CountersPending
	})
	if v, _ := ms[0].Do("GET", "c"); v != strconv.FormatInt(prev, 10) {
		t.Fatalf("master 0 holds %q after its repair, want %d", v, prev)
	}
	ms[1].Pause()
	defer ms[1].Resume()
	if v := incr(t, e, "c", 1); v != prev+1 {
		t.Fatalf("INCR over masters 0 (restored, quarantined) and 2: %d, want %d", v, prev+1)
	}
	w := quorum.NewWaiter()
	r := e.Acquire([]byte("lock"), []byte("t"), time.Second, batching.Now())
	e.Submit(w, r)
	e.Wait(w)
	var nq *quorum.NoQuorumError
	if _, err := r.Result(); !errors.As(err, &nq) {
		t.Fatalf("SET NX with master 0 quarantined and 1 paused: %v, want NOQUORUM", err)
	}
}
