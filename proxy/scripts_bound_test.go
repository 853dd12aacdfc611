package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// scriptsKnown reads INFO's scripts_known.
func scriptsKnown(t *testing.T, cl *redis.Client) int {
	t.Helper()
	info, err := cl.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "scripts_known:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no scripts_known in INFO stats")
	return 0
}

// The sha1s learned from reformatted catalogued scripts are bounded, the
// least recently used going first: 300,000 EVALs with different comments
// kept 300,000 entries before (docs/hardening.md). A dropped sha1 gets
// NOSCRIPT, and a library's EVALSHA-then-EVAL still works; the catalog's
// own sha1s always stay.
func TestLearnedScriptsBounded(t *testing.T) {
	const max = 50
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.LearnedScripts = max })
		ctx := context.Background()
		cl := c.client()
		base := scriptsKnown(t, cl)
		release := builtinBody(t, "bsm-redislock release (node-redlock v3 release)")
		variant := func(i int) string { return fmt.Sprintf("-- copy %d\n%s", i, release) }
		pipe := cl.Pipeline()
		for i := 0; i < 3*max; i++ {
			pipe.Eval(ctx, variant(i), []string{"k"}, "t")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if n := scriptsKnown(t, cl); n != base+max {
			t.Fatalf("scripts_known = %d after %d reformatted copies, want the catalog's %d + %d", n, 3*max, base, max)
		}
		if err := cl.EvalSha(ctx, sha1hex(variant(3*max-1)), []string{"k"}, "t").Err(); err != nil {
			t.Fatalf("EVALSHA of the latest copy: %v", err)
		}
		if err := cl.EvalSha(ctx, sha1hex(variant(0)), []string{"k"}, "t").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			t.Fatalf("EVALSHA of the least recently used copy: %v, want NOSCRIPT", err)
		}
		if n, err := redis.NewScript(variant(0)).Run(ctx, cl, []string{"k"}, "t").Int(); err != nil || n != 0 {
			t.Fatalf("EVALSHA, NOSCRIPT, then EVAL: %v %v", n, err)
		}
		if err := cl.EvalSha(ctx, sha1hex(release), []string{"k"}, "t").Err(); err != nil {
			t.Fatalf("EVALSHA of the catalogued body: %v", err)
		}
	})
}

// One client's SCRIPT FLUSH changes only its own view: before, it cleared
// the table for every client, so every other client's EVALSHA of a
// reformatted script failed. The client that flushed gets what Redis would
// give it: NOSCRIPT for everything loaded before its flush (catalog
// included), so that its library falls back to EVAL, which loads again.
func TestScriptFlushIsPerConnection(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3)
		ctx := context.Background()
		one := func(o *redis.Options) { o.PoolSize = 1 }
		a, b := c.client(one), c.client(one)
		release := builtinBody(t, "bsm-redislock release (node-redlock v3 release)")
		copyBody := "-- our own formatting\n" + release
		if err := a.Eval(ctx, copyBody, []string{"k"}, "t").Err(); err != nil {
			t.Fatal(err)
		}
		shas := []string{sha1hex(copyBody), sha1hex(release)}
		if err := b.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Do(ctx, "SCRIPT", "FLUSH", "NOW").Err(); err == nil || !strings.Contains(err.Error(), "SYNC|ASYNC") {
			t.Fatalf("SCRIPT FLUSH NOW: %v", err)
		}
		for _, sha := range shas {
			if err := a.EvalSha(ctx, sha, []string{"k"}, "t").Err(); err != nil {
				t.Errorf("EVALSHA %s on another connection after a flush: %v", sha, err)
			}
			if err := b.EvalSha(ctx, sha, []string{"k"}, "t").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
				t.Errorf("EVALSHA %s on the connection that flushed: %v, want NOSCRIPT", sha, err)
			}
		}
		if got, err := a.ScriptExists(ctx, shas...).Result(); err != nil || !got[0] || !got[1] {
			t.Errorf("SCRIPT EXISTS on another connection: %v %v", got, err)
		}
		if got, err := b.ScriptExists(ctx, shas...).Result(); err != nil || got[0] || got[1] {
			t.Errorf("SCRIPT EXISTS on the connection that flushed: %v %v", got, err)
		}
		// A library on the flushed connection falls back to EVAL, which
		// loads the script for it again.
		if n, err := redis.NewScript(release).Run(ctx, b, []string{"k"}, "t").Int(); err != nil || n != 0 {
			t.Fatalf("EVALSHA, NOSCRIPT, then EVAL after a flush: %v %v", n, err)
		}
		if err := b.EvalSha(ctx, sha1hex(release), []string{"k"}, "t").Err(); err != nil {
			t.Fatalf("EVALSHA after EVAL on the flushed connection: %v", err)
		}
		if sha, err := b.ScriptLoad(ctx, copyBody).Result(); err != nil || sha != shas[0] {
			t.Fatalf("SCRIPT LOAD: %q %v", sha, err)
		}
		if err := b.EvalSha(ctx, shas[0], []string{"k"}, "t").Err(); err != nil {
			t.Fatalf("EVALSHA after SCRIPT LOAD on the flushed connection: %v", err)
		}
	})
}

// cachedScripts reads number_of_cached_scripts of each master.
func cachedScripts(t *testing.T, c *cluster) []int {
	t.Helper()
	var out []int
	for _, m := range c.masters {
		info, err := m.Do("INFO", "memory")
		if err != nil {
			t.Fatal(err)
		}
		n := -1
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "number_of_cached_scripts:"); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		out = append(out, n)
	}
	return out
}

// Understood scripts are loaded on every master, and Redis never drops a
// script loaded by SCRIPT LOAD: a client sending a release with another
// local name each time grew every master's script cache without end (8 KB
// of RSS per script on each master, docs/hardening.md). lockproxy keeps at
// most UnderstoodPerMaster of them loaded on a master, flushing its
// scripts (and loading its own and the catalog's again) before the one
// past it; a flushed script still in use is loaded again, with no
// NOSCRIPT reaching the client.
func TestUnderstoodScriptsOnMastersBounded(t *testing.T) {
	const bound, n = 16, 120
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.UnderstoodPerMaster = bound })
	ctx := context.Background()
	cl := c.client()
	base := cachedScripts(t, c)
	release := func(i int) string {
		return fmt.Sprintf("local v%d = redis.call(\"get\", KEYS[1])\nif v%d == ARGV[1] then return redis.call(\"del\", KEYS[1]) else return 0 end", i, i)
	}
	for i := range n {
		if got, err := cl.Eval(ctx, release(i), []string{"k"}, "t").Int(); err != nil || got != 0 {
			t.Fatalf("EVAL of understood release %d: %v, %v; want 0", i, got, err)
		}
	}
	for m, got := range cachedScripts(t, c) {
		if got > base[m]+bound {
			t.Errorf("master %d caches %d scripts after %d distinct understood ones: lockproxy's and the catalog's %d, and %d more; want at most %d more", m, got, n, base[m], got-base[m], bound)
		}
	}
	info, err := cl.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "master_script_flushes:") || strings.Contains(info, "master_script_flushes:0\r\n") {
		t.Errorf("INFO stats counts no master_script_flushes")
	}
	// A script flushed from the masters still works: it is loaded again.
	if err := cl.SetNX(ctx, "lk", "tok", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.EvalSha(ctx, sha1hex(release(0)), []string{"lk"}, "tok").Int(); err != nil || got != 1 {
		t.Fatalf("EVALSHA of the first understood release, flushed since: %v, %v; want 1", got, err)
	}
	// So do the catalog's, and lockproxy's own (EXISTS reads through one).
	body := builtinBody(t, "bsm-redislock release (node-redlock v3 release)")
	if err := cl.SetNX(ctx, "lk", "tok", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.EvalSha(ctx, sha1hex(body), []string{"lk"}, "tok").Int(); err != nil || got != 1 {
		t.Fatalf("EVALSHA of a catalogued release after the flushes: %v, %v; want 1", got, err)
	}
	if n, err := cl.Exists(ctx, "lk").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS of the released lock: %v, %v; want 0", n, err)
	}
	// Clients running scripts at once while masters are flushed: every
	// EVALSHA lockproxy sends finds its script (a flush is queued with
	// the loads it makes necessary, ahead of any EVALSHA queued after it).
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 60 {
				i := n + (g*60+j*7)%90
				if got, err := cl.Eval(ctx, release(i), []string{"k"}, "t").Int(); err != nil || got != 0 {
					t.Errorf("EVAL of understood release %d: %v, %v; want 0", i, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for m, srv := range c.masters {
		stats, err := srv.Do("INFO", "errorstats")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stats, "NOSCRIPT") {
			t.Errorf("master %d answered NOSCRIPT: %s", m, stats)
		}
	}
}
