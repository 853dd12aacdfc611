package proxy_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// The classic compare-and-delete and compare-and-pexpire, as redsync v4.8
// and bsm send them.
const (
	releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	extendScript  = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
)

func TestAcquireContendReleaseExtend(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	cl := c.client()

	ok, err := cl.SetNX(ctx, "lock:a", "tok1", 10*time.Second).Result()
	if err != nil || !ok {
		t.Fatalf("acquire: ok=%v err=%v", ok, err)
	}
	// The acquisition was written to every master: after a quorum said
	// yes, the others follow in the same batch. Poll, never sleep.
	waitFor(t, func() bool { return count(c.onMasters("lock:a"), "tok1") == 5 }, "token on all 5 masters")

	ok, err = cl.SetNX(ctx, "lock:a", "tok2", 10*time.Second).Result()
	if err != nil || ok {
		t.Fatalf("contended acquire: ok=%v err=%v, want false, nil", ok, err)
	}
	if got := c.onMasters("lock:a"); count(got, "tok2") != 0 {
		t.Fatalf("contender's token left on masters: %v", got)
	}

	// GET and PTTL are quorum reads.
	if v, err := cl.Get(ctx, "lock:a").Result(); err != nil || v != "tok1" {
		t.Fatalf("GET = %q, %v", v, err)
	}
	pttl, err := cl.PTTL(ctx, "lock:a").Result()
	if err != nil || pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Fatalf("PTTL = %v, %v; want in (9s, 10s]", pttl, err)
	}

	// Extend through the script: the TTL moves on a quorum.
	ext := redis.NewScript(extendScript)
	if n, err := ext.Run(ctx, cl, []string{"lock:a"}, "tok1", 30000).Int(); err != nil || n != 1 {
		t.Fatalf("extend: %d, %v", n, err)
	}
	moved := 0
	for _, m := range c.masters {
		v, _ := m.Do("PTTL", "lock:a")
		var ms int
		fmt.Sscan(v, &ms)
		if ms > 20000 {
			moved++
		}
	}
	if moved < 3 {
		t.Fatalf("extend moved the TTL on %d masters, want a quorum", moved)
	}

	// Wrong token: 0, nothing removed.
	rel := redis.NewScript(releaseScript)
	if n, err := rel.Run(ctx, cl, []string{"lock:a"}, "stranger").Int(); err != nil || n != 0 {
		t.Fatalf("wrong-token release: %d, %v; want 0", n, err)
	}
	if got := c.onMasters("lock:a"); count(got, "tok1") != 5 {
		t.Fatalf("wrong-token release removed something: %v", got)
	}
	// Right token: 1, gone from every master.
	if n, err := rel.Run(ctx, cl, []string{"lock:a"}, "tok1").Int(); err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	waitFor(t, func() bool { return count(c.onMasters("lock:a"), "(nil)") == 5 }, "key gone from all masters")
	if ok, err := cl.SetNX(ctx, "lock:a", "tok3", time.Second).Result(); err != nil || !ok {
		t.Fatalf("acquire after release: ok=%v err=%v", ok, err)
	}
}

func TestSetOptionSpellings(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	future := time.Now().Add(20 * time.Second)
	for i, args := range [][]any{
		{"NX", "PX", 5000},
		{"px", 5000, "nx"},
		{"Ex", 5, "nX"},
		{"NX", "PXAT", future.UnixMilli()},
		{"exat", future.Unix(), "NX"},
	} {
		key := fmt.Sprintf("spell:%d", i)
		all := append([]any{"SET", key, "v"}, args...)
		if v, err := cl.Do(ctx, all...).Result(); err != nil || v != "OK" {
			t.Errorf("%v: %v, %v", all, v, err)
		}
		if _, err := cl.Do(ctx, all...).Result(); err != redis.Nil {
			t.Errorf("second %v: want nil, got %v", all, err)
		}
	}
	for _, args := range [][]any{
		{"SET", "k", "v"},
		{"SET", "k", "v", "PX", 100},
		{"SET", "k", "v", "NX"},
		{"SET", "k", "v", "XX"},
		{"SET", "k", "v", "XX", "KEEPTTL"},
		{"SET", "k", "v", "NX", "XX", "PX", 100},
		{"SET", "k", "v", "XX", "PX", 61000},
		{"SET", "k", "v", "NX", "PX", 100, "GET"},
		{"SET", "k", "v", "NX", "KEEPTTL"},
		{"SET", "k", "v", "NX", "PX", 100, "EX", 1},
		{"SET", "k", "v", "NX", "PX"},
		{"SET", "k", "v", "NX", "PX", "abc"},
		{"SET", "k", "v", "NX", "PX", -5},
		{"SET", "k", "v", "NX", "PX", 0},
		{"SET", "k", "v", "NX", "PX", 61000},
		{"SET", "k", "v", "NX", "EX", 9999999999},
		{"SET", "k", "v", "NX", "PX", 100, "BOGUS"},
		{"SET", "k"},
		{"SETNX", "k", "v"},
	} {
		_, err := cl.Do(ctx, args...).Result()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR") {
			t.Errorf("%v: want -ERR, got %v", args, err)
		}
	}
	if got := c.onMasters("k"); count(got, "(nil)") != 3 {
		t.Fatalf("refused SETs reached the masters: %v", got)
	}
}

func TestMinorityAcquisitionIsUndone(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	// Someone else holds the key on 3 of 5 masters.
	for _, m := range c.masters[:3] {
		if _, err := m.Do("SET", "lock:m", "other", "PX", "10000"); err != nil {
			t.Fatal(err)
		}
	}
	cl := c.client()
	ok, err := cl.SetNX(ctx, "lock:m", "mine", 10*time.Second).Result()
	if err != nil || ok {
		t.Fatalf("minority acquisition: ok=%v err=%v; want refused", ok, err)
	}
	// The two masters that granted it are undone; poll until the undo has
	// been applied.
	waitFor(t, func() bool { return count(c.onMasters("lock:m"), "mine") == 0 }, "no trace of the refused token")
	if got := c.onMasters("lock:m"); count(got, "other") != 3 {
		t.Fatalf("the holder's keys were touched: %v", got)
	}
}

func TestMastersDown(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	cl := c.client()
	c.masters[0].Kill()
	c.masters[1].Kill()
	ok, err := cl.SetNX(ctx, "lock:d", "t", 5*time.Second).Result()
	if err != nil || !ok {
		t.Fatalf("with 2 of 5 down: ok=%v err=%v", ok, err)
	}
	c.masters[2].Kill()
	start := time.Now()
	_, err = cl.SetNX(ctx, "lock:e", "t", 5*time.Second).Result()
	took := time.Since(start)
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM 2 of 5 masters answered, 3 needed") {
		t.Fatalf("with 3 of 5 down: want NOQUORUM, got %v", err)
	}
	if took > 250*time.Millisecond+250*time.Millisecond {
		t.Fatalf("NOQUORUM took %v, want within node_timeout plus a margin", took)
	}
	// A read must not mistake a dead quorum for a missing key either.
	if _, err := cl.Get(ctx, "lock:d").Result(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("GET with 3 of 5 down: want NOQUORUM, got %v", err)
	}
	// Back: a restarted master is redialled.
	if err := c.masters[2].Restart(); err != nil {
		t.Fatal(err)
	}
	c.waitVoting(3) // once its eviction policy is checked
	if ok, err := cl.SetNX(ctx, "lock:f", "t", 5*time.Second).Result(); err != nil || !ok {
		t.Fatalf("after restart: ok=%v err=%v", ok, err)
	}
}

func TestUnknownCommandsAndScriptsNeverReachMasters(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	before := make([]string, len(c.masters))
	for i, m := range c.masters {
		before[i], _ = m.Do("INFO", "commandstats")
	}
	for _, args := range [][]any{
		{"FLUSHALL"}, {"KEYS", "*"}, {"CONFIG", "SET", "maxmemory", "1"}, {"SUBSCRIBE", "x"},
		{"EVAL", `return redis.call("flushall")`, 0},
		{"EVAL", `if redis.call("get", KEYS[1] .. ":x") == ARGV[1] then return redis.call("unlink", KEYS[1]) else return 0 end`, 1, "k", "v"},
		{"EVALSHA", "0123456789012345678901234567890123456789", 0},
		{"SCRIPT", "LOAD", `return 1`},
	} {
		_, err := cl.Do(ctx, args...).Result()
		if err == nil {
			t.Errorf("%v: want an error", args)
			continue
		}
		msg := err.Error()
		switch {
		case args[0] == "EVALSHA" && !strings.HasPrefix(msg, "NOSCRIPT"):
			t.Errorf("%v: want NOSCRIPT, got %v", args, msg)
		case args[0] == "EVAL" && !strings.Contains(msg, "[[scripts]]"):
			t.Errorf("%v: error should say how to register the script: %v", args, msg)
		case args[0] != "EVAL" && args[0] != "EVALSHA" && !strings.HasPrefix(msg, "ERR"):
			t.Errorf("%v: want -ERR, got %v", args, msg)
		}
	}
	// The connection still works.
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i, m := range c.masters {
		after, _ := m.Do("INFO", "commandstats")
		if stripInfo(after) != stripInfo(before[i]) {
			t.Fatalf("master %d saw commands:\nbefore %s\nafter  %s", i, before[i], after)
		}
	}
}

// stripInfo drops INFO commandstats lines of the INFO command itself and
// the usec timings, keeping per-command call counts.
func stripInfo(s string) string {
	var out []string
	for _, f := range strings.Fields(s) {
		// INFO is the test's own; CONFIG GET the monitor's periodic
		// eviction-policy check, not a client's.
		if strings.HasPrefix(f, "cmdstat_info:") || strings.HasPrefix(f, "cmdstat_config|get:") {
			continue
		}
		if i := strings.Index(f, ",usec"); i > 0 {
			f = f[:i]
		}
		out = append(out, f)
	}
	return strings.Join(out, " ")
}

func TestRESP3AfterHello(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client(func(o *redis.Options) { o.Protocol = 3 })
	if ok, err := cl.SetNX(ctx, "r3", "t", 5*time.Second).Result(); err != nil || !ok {
		t.Fatalf("RESP3 acquire: %v %v", ok, err)
	}
	if _, err := cl.SetNX(ctx, "r3", "u", 5*time.Second).Result(); err != nil {
		t.Fatalf("RESP3 contended acquire must be a null, not an error: %v", err)
	}
	if _, err := cl.Get(ctx, "missing").Result(); err != redis.Nil {
		t.Fatalf("RESP3 GET missing: want nil, got %v", err)
	}
	// The raw HELLO 3 reply is a map.
	v, err := cl.Do(ctx, "HELLO", "3").Result()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(map[any]any)
	if !ok || m["proto"] != int64(3) || m["server"] == nil {
		t.Fatalf("HELLO 3 reply %#v", v)
	}
}

func TestPipelinedRepliesInOrder(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	cl := c.client()
	pipe := cl.Pipeline()
	var cmds []redis.Cmder
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("p:%d", i%10) // each key 5 times: first wins
		cmds = append(cmds, pipe.SetNX(ctx, key, fmt.Sprint(i), 10*time.Second))
		cmds = append(cmds, pipe.Ping(ctx))
		cmds = append(cmds, pipe.Echo(ctx, fmt.Sprint(i)))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		set := cmds[3*i].(*redis.BoolCmd)
		if want := i < 10; set.Val() != want {
			t.Errorf("SETNX #%d = %v, want %v", i, set.Val(), want)
		}
		if e := cmds[3*i+2].(*redis.StringCmd).Val(); e != fmt.Sprint(i) {
			t.Errorf("ECHO #%d = %q", i, e)
		}
	}
}

func TestConcurrentSameKeyOneWinner(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	cl := c.client(func(o *redis.Options) { o.PoolSize = 32 })
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ok, err := cl.SetNX(ctx, "hot", fmt.Sprint(i), 10*time.Second).Result()
			if err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
			if ok {
				mu.Lock()
				winners++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if winners != 1 {
		t.Fatalf("%d winners for one key, want exactly 1 (same-key requests must not split the vote)", winners)
	}
}

// waitFor polls cond until it holds or 5s pass.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A custom script registered by sha1 only is not preloaded on the masters:
// an EVAL of its text is forwarded as that text, and works.
func TestCustomScriptBySHA1Only(t *testing.T) {
	body := `local v = redis.call("get", KEYS[1]) if v == ARGV[1] then redis.call("del", KEYS[1]) return 1 end return 0`
	sum := sha1.Sum([]byte(body))
	sha := hex.EncodeToString(sum[:])
	cat, err := catalog.New([]catalog.ScriptConfig{{Name: "my release", SHA1: sha, Kind: "release", Vote: "one"}})
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.Catalog = cat })
	ctx := context.Background()
	cl := c.client()
	if ok, err := cl.SetNX(ctx, "custom", "tok", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if n, err := cl.Eval(ctx, body, []string{"custom"}, "tok").Int(); err != nil || n != 1 {
		t.Fatalf("EVAL of the sha1-only custom release: %d, %v", n, err)
	}
	waitFor(t, func() bool { return count(c.onMasters("custom"), "(nil)") == 3 }, "released on every master")
}

// redis-py's additive extend adds to the remaining TTL; repeated, it would
// grow a key past max_ttl, which the restart quarantine relies on no key
// outliving. lockproxy caps it.
func TestRedisPyAdditiveExtendCappedAtMaxTTL(t *testing.T) {
	body, err := os.ReadFile("catalog/scripts/redis-py_extend.lua")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.MaxTTL = 3 * time.Second })
	ctx := context.Background()
	cl := c.client()
	if ok, err := cl.SetNX(ctx, "pyext", "tok", 2*time.Second).Result(); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	ext := redis.NewScript(string(body))
	for i := 0; i < 3; i++ { // additive: +2000ms each time
		if n, err := ext.Run(ctx, cl, []string{"pyext"}, "tok", 2000, "0").Int(); err != nil || n != 1 {
			t.Fatalf("additive extend %d: %d, %v", i, n, err)
		}
	}
	for i, m := range c.masters {
		v, _ := m.Do("PTTL", "pyext")
		var ms int
		fmt.Sscan(v, &ms)
		if ms > 3000 || ms < 2000 {
			t.Errorf("master %d: PTTL %dms after additive extends; want capped at max_ttl 3000ms, at least the 2000ms asked", i, ms)
		}
	}
	// Replace mode and a stranger's token behave as redis-py expects.
	if n, err := ext.Run(ctx, cl, []string{"pyext"}, "tok", 2500, "1").Int(); err != nil || n != 1 {
		t.Fatalf("replace extend: %d, %v", n, err)
	}
	if n, err := ext.Run(ctx, cl, []string{"pyext"}, "other", 2500, "1").Int(); err != nil || n != 0 {
		t.Fatalf("stranger's extend: %d, %v; want 0", n, err)
	}
}

// TestSetXXExtendsTheHoldersLock: SET key token XX PX ttl, the renewal of
// some lock libraries (redis-mutex), extends the key on the masters where
// it holds token, with validity accounted, and answers +OK; where another
// token holds it, or nothing, it answers nil and changes nothing (Redis
// would overwrite the holder's token: lockproxy never gives a held lock
// to a stranger).
func TestSetXXExtendsTheHoldersLock(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	if ok, err := cl.SetNX(ctx, "xx", "tok", 2*time.Second).Result(); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if v, err := cl.Do(ctx, "SET", "xx", "tok", "XX", "PX", 9000).Result(); err != nil || v != "OK" {
		t.Fatalf("the holder's SET XX PX: %v, %v; want OK", v, err)
	}
	pttl := func(m *redisproc.Server) int {
		v, _ := m.Do("PTTL", "xx")
		var ms int
		fmt.Sscan(v, &ms)
		return ms
	}
	// The answer comes once a quorum extended; the last master may still
	// be writing.
	extended := 0
	for i, m := range c.masters {
		switch ms := pttl(m); {
		case ms > 9000:
			t.Errorf("master %d: PTTL %dms after SET XX PX 9000", i, ms)
		case ms >= 8000:
			extended++
		}
	}
	if extended < 2 {
		t.Errorf("%d of 3 masters extended when SET XX PX 9000 answered OK, want a quorum", extended)
	}
	waitFor(t, func() bool {
		for _, m := range c.masters {
			if pttl(m) <= 2000 { // the acquisition's 2s, not extended
				return false
			}
		}
		return true
	}, "every master to extend the holder's lock")
	if _, err := cl.Do(ctx, "SET", "xx", "stranger", "px", 30000, "xx").Result(); err != redis.Nil {
		t.Fatalf("a stranger's SET XX: %v; want nil", err)
	}
	if got := c.onMasters("xx"); count(got, "tok") != 3 {
		t.Fatalf("after a stranger's SET XX the masters hold %v; want the holder's token everywhere", got)
	}
	if _, err := cl.Do(ctx, "SET", "xx-free", "tok", "XX", "EX", 5).Result(); err != redis.Nil {
		t.Fatalf("SET XX of a free key: %v; want nil", err)
	}
	if got := c.onMasters("xx-free"); count(got, "(nil)") != 3 {
		t.Fatalf("SET XX of a free key wrote %v", got)
	}
}

// One connection's pipeline runs in the order it was sent, even on a busy
// key: [SET NX k t1, SET NX k t2, release k t1] is OK, nil, 1 as on Redis
// (the release must not jump ahead of t2's SET NX from the same client),
// and a GET pipelined after a SET NX sees it.
func TestPipelineOrderOnOneKey(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	cl := c.client()
	pipe := cl.Pipeline()
	a := pipe.SetNX(ctx, "ord", "t1", 10*time.Second)
	b := pipe.SetNX(ctx, "ord", "t2", 10*time.Second)
	rel := pipe.Eval(ctx, releaseScript, []string{"ord"}, "t1")
	get := pipe.Get(ctx, "ord")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if !a.Val() || b.Val() {
		t.Fatalf("SET NX t1 = %v, SET NX t2 = %v; want true, false", a.Val(), b.Val())
	}
	if n, _ := rel.Int(); n != 1 {
		t.Fatalf("release t1 = %v, want 1", rel.Val())
	}
	if get.Err() != redis.Nil {
		t.Fatalf("GET after the release = %q, %v; want nil", get.Val(), get.Err())
	}
	waitFor(t, func() bool { return count(c.onMasters("ord"), "(nil)") == 5 }, "no key left")

	pipe = cl.Pipeline()
	pipe.SetNX(ctx, "ord2", "t3", 10*time.Second)
	get = pipe.Get(ctx, "ord2")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if get.Val() != "t3" {
		t.Fatalf("GET pipelined after SET NX = %q, want t3", get.Val())
	}
}
