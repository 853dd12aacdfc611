package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

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
