package proxy_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy/catalog"
)

// pyUnlock is python-redis-lock's unlock script (catalogued): it deletes
// the lock and pushes 1 to the signal list, KEYS[2].
func pyUnlock(t testing.TB) string {
	t.Helper()
	cat, err := catalog.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cat.Scripts() {
		if s.Name == "python-redis-lock unlock" {
			return s.Body
		}
	}
	t.Fatal("python-redis-lock unlock is not in the catalog")
	return ""
}

// TestBLPOPWokenByReleaseOnOtherProxy is python-redis-lock's blocking
// acquire through two proxies: the waiter, refused, blocks in BLPOP on the
// lock's signal list on proxy A; the holder releases with the library's
// script on proxy B; the waiter wakes with the signal and takes the lock.
func TestBLPOPWokenByReleaseOnOtherProxy(t *testing.T) {
	a, b := twoProxies(t, "")
	ctx := context.Background()
	holder, waiter := b.client(), a.client()
	if ok, _ := holder.SetNX(ctx, "lock:x", "h", 30*time.Second).Result(); !ok {
		t.Fatal("holder did not get the lock")
	}
	if ok, _ := waiter.SetNX(ctx, "lock:x", "w", 30*time.Second).Result(); ok {
		t.Fatal("waiter got a held lock")
	}
	type popped struct {
		v   []string
		err error
		at  time.Time
	}
	done := make(chan popped, 1)
	go func() {
		v, err := waiter.BLPop(ctx, 10*time.Second, "lock-signal:x").Result()
		done <- popped{v, err, time.Now()}
	}()
	waitBlocked(t, a, 1)
	released := time.Now()
	if n, err := holder.Eval(ctx, pyUnlock(t), []string{"lock:x", "lock-signal:x"}, "h", 1000).Int(); err != nil || n != 0 {
		t.Fatalf("unlock: %v %v", n, err)
	}
	p := <-done
	if p.err != nil || len(p.v) != 2 || p.v[0] != "lock-signal:x" || p.v[1] != "1" {
		t.Fatalf("BLPOP: %v %v", p.v, p.err)
	}
	t.Logf("woken %v after the release was sent", p.at.Sub(released))
	if ok, _ := waiter.SetNX(ctx, "lock:x", "w", 30*time.Second).Result(); !ok {
		t.Fatal("the woken waiter did not get the released lock")
	}
	if n := waitBlocked(t, a, 0); n != 0 {
		t.Fatalf("blocked_clients %d after the wake-up", n)
	}
}

// waitBlocked waits until INFO says n clients are blocked on c.
func waitBlocked(t testing.TB, c *cluster, n int) int {
	t.Helper()
	waitInfo(t, c, "blocked_clients:"+itoa(n)+"\r\n")
	return n
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestBLPOPTimeoutAndOrder: the timeout is honoured (a null array in
// RESP2, null in RESP3); the commands pipelined after a BLPOP wait for it;
// other connections on the same loop go on meanwhile.
func TestBLPOPTimeoutAndOrder(t *testing.T) {
	a := startHubFront(t, redisproc.ForTest(t, 3), "")
	wait := 5 * time.Second
	rc := a.respConn()
	start := time.Now()
	rc.conn.Write([]byte("*3\r\n$5\r\nBLPOP\r\n$5\r\nempty\r\n$3\r\n0.3\r\n*1\r\n$4\r\nPING\r\n"))
	other := a.client()
	for i := 0; i < 10; i++ {
		if err := other.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("another client while one is blocked: %v", err)
		}
	}
	if time.Since(start) > 250*time.Millisecond {
		t.Logf("warning: the other client's PINGs took %v (a loaded machine)", time.Since(start))
	}
	if got := rc.mustFrame(wait); got != "*-1\r\n" {
		t.Fatalf("BLPOP timeout: %q, want *-1", got)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Fatalf("BLPOP 0.3 answered after %v", el)
	}
	if got := rc.mustFrame(wait); got != "+PONG\r\n" {
		t.Fatalf("the PING after BLPOP: %q", got)
	}
	rc.send("HELLO", "3")
	rc.mustFrame(wait)
	rc.send("BRPOP", "empty", "0.05")
	if got := rc.mustFrame(wait); got != "_\r\n" {
		t.Fatalf("BRPOP timeout in RESP3: %q, want _", got)
	}
}

// TestBLPOPReplies: an element already there is answered at once, from
// the head (BLPOP) or the tail (BRPOP), of the first non-empty list; a
// lock key is not a list (WRONGTYPE, as Redis); bad timeouts are refused
// as Redis refuses them.
func TestBLPOPReplies(t *testing.T) {
	a := startHubFront(t, redisproc.ForTest(t, 3), "")
	for _, m := range a.masters {
		if _, err := m.Do("RPUSH", "sig", "first", "last"); err != nil {
			t.Fatal(err)
		}
	}
	rc := a.respConn()
	wait := 5 * time.Second
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"BLPOP", "none", "sig", "1"}, "*2\r\n" + bulk("sig") + bulk("first")},
		{[]string{"BRPOP", "sig", "1"}, "*2\r\n" + bulk("sig") + bulk("last")},
		{[]string{"BLPOP", "sig", "x"}, "-ERR timeout is not a float or out of range\r\n"},
		{[]string{"BLPOP", "sig", "-1"}, "-ERR timeout is negative\r\n"},
		// redis-server 7.0.15's replies: inf and an overflowing timeout are
		// "negative" there (its milliseconds overflow), nan is not a float.
		{[]string{"BLPOP", "sig", "inf"}, "-ERR timeout is negative\r\n"},
		{[]string{"BLPOP", "sig", "1e20"}, "-ERR timeout is negative\r\n"},
		{[]string{"BLPOP", "sig", "nan"}, "-ERR timeout is not a float or out of range\r\n"},
		{[]string{"BLPOP", "sig"}, "-ERR wrong number of arguments for 'blpop' command\r\n"},
	} {
		rc.send(c.args...)
		if got := rc.mustFrame(wait); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
	cl := a.client()
	if ok, _ := cl.SetNX(context.Background(), "lockkey", "t", time.Minute).Result(); !ok {
		t.Fatal("SET NX")
	}
	rc.send("BLPOP", "lockkey", "1")
	if got := rc.mustFrame(wait); !strings.HasPrefix(got, "-WRONGTYPE") {
		t.Errorf("BLPOP of a lock key: %q, want WRONGTYPE", got)
	}
}

// TestBLPOPClosedAndShutdown: a blocked client that goes away is no longer
// counted; one blocked at shutdown is told, not left hanging.
func TestBLPOPClosedAndShutdown(t *testing.T) {
	a := startHubFront(t, redisproc.ForTest(t, 3), "")
	rc := a.respConn()
	rc.send("BLPOP", "k", "0")
	waitBlocked(t, a, 1)
	rc.conn.Close()
	waitBlocked(t, a, 0)

	rc = a.respConn()
	rc.send("BLPOP", "k", "0")
	waitBlocked(t, a, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	go a.srv.Shutdown(ctx)
	if got := rc.mustFrame(5 * time.Second); got != "-ERR lockproxy is shutting down\r\n" {
		t.Fatalf("blocked client at shutdown: %q", got)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("shutdown answered the blocked client after %v", el)
	}
}

// evalshaCalls sums the EVALSHA calls the masters of c ran (pop rounds,
// lock scripts, lockproxy's own checks).
func evalshaCalls(t *testing.T, c *cluster) int {
	t.Helper()
	n := 0
	for _, k := range evalshaPerMaster(t, c) {
		n += k
	}
	return n
}

// evalshaPerMaster is each master's count of EVALSHA calls.
func evalshaPerMaster(t *testing.T, c *cluster) []int {
	t.Helper()
	out := make([]int, len(c.masters))
	for i, m := range c.masters {
		info, err := m.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		if j := strings.Index(info, "cmdstat_evalsha:calls="); j >= 0 {
			v := info[j+len("cmdstat_evalsha:calls="):]
			v = v[:strings.IndexByte(v, ',')]
			out[i], _ = strconv.Atoi(v)
		}
	}
	return out
}

// waitRoundsRun waits until every master has run at least base[i]+n
// EVALSHAs and no pop round of c is in flight: a round is decided once a
// quorum answered, and a slower master runs its pop later. check runs
// at each look (it fails the test on what makes the wait pointless).
func waitRoundsRun(t *testing.T, c *cluster, base []int, n int, check func()) {
	t.Helper()
	cl := c.client()
	deadline := time.Now().Add(10 * time.Second)
	for {
		check()
		ran := evalshaPerMaster(t, c)
		info, err := cl.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		done := strings.Contains(info, "blocked_pop_rounds:0\r\n")
		for i, k := range ran {
			done = done && k >= base[i]+n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("masters ran %v EVALSHAs, want at least %d more than %v, and no round in flight: %s", ran, n, base, info)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sameGrowth waits until every master of c ran as many EVALSHAs more than
// base as the others, at least one, and returns how many.
func sameGrowth(t *testing.T, c *cluster, base []int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := evalshaPerMaster(t, c)
		d := now[0] - base[0]
		same := d > 0
		for i := range now {
			same = same && now[i]-base[i] == d
		}
		if same {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("masters ran %v EVALSHAs since %v: never the same number more", now, base)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestBLPOPWakesOnePerPush: 20 clients wait in BLPOP on one signal list of
// proxy A; each release through proxy B pushes one element, which one
// waiter gets. Only one waiter is woken per push: waking all 20 made each
// run a pop round on every master (60 EVALSHAs over 3 masters for one
// element). A round that leaves nothing on any master wakes no other
// waiter to look for more: it ran one, and under load that one popped the
// copy of a master that ran the release after the first round had popped
// there, a second client served for one push (helper-71: 2 of 120 runs on
// 2 loaded cores). Each further push wakes one more waiter.
//
// The waiters' first rounds must be over, on every master, before the
// first push: a round still in flight at a master that runs the push
// before it pops the copy there, a second client served. A sleep of
// 300 ms was not enough on a loaded machine (one of the 120 runs: a
// master ran the first rounds' pops 400 ms late).
func TestBLPOPWakesOnePerPush(t *testing.T) {
	a, b := twoProxies(t, "")
	ctx := context.Background()
	holder := b.client()
	const waiters = 20
	got := make(chan []string, waiters)
	// A waiter's error (a NOQUORUM round when the machine is so loaded
	// that the masters miss node_timeout) is one waiter less blocked, which
	// must not read as one served.
	errs := make(chan error, waiters)
	noErrors := func() {
		t.Helper()
		select {
		case err := <-errs:
			t.Fatalf("a waiter's BLPOP failed: %v", err)
		default:
		}
	}
	base := evalshaPerMaster(t, a)
	for i := 0; i < waiters; i++ {
		cl := a.client()
		go func() {
			v, err := cl.BLPop(ctx, 20*time.Second, "lock-signal:x").Result()
			if err != nil {
				errs <- err
				return
			}
			got <- v
		}()
	}
	waitRoundsRun(t, a, base, waiters, noErrors)
	waitBlocked(t, a, waiters)
	unlock := pyUnlock(t)
	release := func() {
		t.Helper()
		if ok, _ := holder.SetNX(ctx, "lock:x", "h", 30*time.Second).Result(); !ok {
			t.Fatal("holder did not get the lock")
		}
		if n, err := holder.Eval(ctx, unlock, []string{"lock:x", "lock-signal:x"}, "h", 10000).Int(); err != nil || n != 0 {
			t.Fatalf("unlock: %v %v", n, err)
		}
	}
	// What a release runs on each master (its script), from one with
	// no waiter to wake (another list), so that the pops are counted
	// exactly below.
	before := evalshaPerMaster(t, a)
	if ok, _ := holder.SetNX(ctx, "lock:y", "h", 30*time.Second).Result(); !ok {
		t.Fatal("holder did not get lock:y")
	}
	if n, err := holder.Eval(ctx, unlock, []string{"lock:y", "lock-signal:y"}, "h", 10000).Int(); err != nil || n != 0 {
		t.Fatalf("unlock of lock:y: %v %v", n, err)
	}
	perRelease := sameGrowth(t, a, before)

	before = evalshaPerMaster(t, a)
	release()
	select {
	case v := <-got:
		if len(v) != 2 || v[1] != "1" {
			t.Fatalf("BLPOP: %v", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no waiter woken by the push")
	}
	// A round that wakes another waiter starts it before it answers its
	// own client: with none in flight, none more runs (a round decided by
	// a quorum ran on 2 masters at least).
	waitRoundsRun(t, a, before, perRelease+1, noErrors)
	waitBlocked(t, a, waiters-1)
	// One round, one EVALSHA per master: 20 woken waiters were 60 pops, a
	// waiter woken to look for a second element 3 more.
	pops := -3 * perRelease
	for i, k := range evalshaPerMaster(t, a) {
		pops += k - before[i]
	}
	if pops > 3 {
		t.Errorf("one push cost %d pop EVALSHAs over 3 masters (and its release %d on each): more than one round, one waiter woken", pops, perRelease)
	}
	noErrors()
	if len(got) != 0 {
		t.Fatalf("%d more waiters returned for one push", len(got))
	}
	for i := 2; i <= 4; i++ {
		before = evalshaPerMaster(t, a)
		release()
		select {
		case <-got:
		case err := <-errs:
			t.Fatalf("a waiter's BLPOP failed: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("push %d woke no waiter", i)
		}
		waitRoundsRun(t, a, before, perRelease+1, noErrors)
		if len(got) != 0 {
			t.Fatalf("push %d: %d more waiters returned", i, len(got))
		}
		waitBlocked(t, a, waiters-i)
	}
}
