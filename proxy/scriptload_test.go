package proxy_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScriptLoadUnderstood: SCRIPT LOAD of a script the catalog lacks is
// understood as EVAL's body is (libraries that load first and then run
// EVALSHA: node-redis-script, warlock, simple-redis-mutex), on both
// transports; a script lockproxy cannot run is refused at load with its
// reason, not at the EVALSHA that follows.
func TestScriptLoadUnderstood(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB, int, ...clusterOpt) *cluster
	}{{"tcp", startCluster}, {"tls", startClusterTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.start(t, 3)
			ctx := context.Background()
			cl := c.client()
			body := `local key = KEYS[1] local id = ARGV[1] if redis.call("get", key) == id then return redis.call("del", key) end return 0`
			sum := sha1.Sum([]byte(body))
			want := hex.EncodeToString(sum[:])
			sha, err := cl.ScriptLoad(ctx, body).Result()
			if err != nil || sha != want {
				t.Fatalf("SCRIPT LOAD of an understood release: %q %v, want %s", sha, err, want)
			}
			if ok, err := cl.SetNX(ctx, "sl", "tok", 10*time.Second).Result(); err != nil || !ok {
				t.Fatalf("SET NX: %v %v", ok, err)
			}
			if n, err := cl.EvalSha(ctx, sha, []string{"sl"}, "other").Int(); err != nil || n != 0 {
				t.Fatalf("EVALSHA release by a stranger: %v %v, want 0", n, err)
			}
			if n, err := cl.EvalSha(ctx, sha, []string{"sl"}, "tok").Int(); err != nil || n != 1 {
				t.Fatalf("EVALSHA release by the holder: %v %v, want 1", n, err)
			}
			// The release is answered once a quorum deleted the key; the
			// last master may run it a moment later (it is sent however
			// late, so it gets there).
			for _, m := range c.masters {
				deadline := time.Now().Add(2 * time.Second)
				for v, _ := m.Do("EXISTS", "sl"); v != "0"; v, _ = m.Do("EXISTS", "sl") {
					if time.Now().After(deadline) {
						t.Fatalf("master %s still has the released key 2s after the release", m.Addr)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			_, err = cl.ScriptLoad(ctx, `return redis.call("flushall")`).Result()
			if err == nil || !strings.Contains(err.Error(), "lockproxy does not run it, because") {
				t.Fatalf("SCRIPT LOAD of FLUSHALL: %v, want the refusal and its reason", err)
			}
		})
	}
}

// TestReleaseAnsweringTheSame: a release script that answers nil whether
// it deleted or not (simple-redis-mutex 3) runs on every master: the
// holder's release deletes the key everywhere, a stranger's deletes
// nothing, and both hear nil, as from one Redis.
func TestReleaseAnsweringTheSame(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	body := `local lockKey = KEYS[1] local lockValue = ARGV[1]
if redis.call("GET", lockKey) == lockValue then redis.call("DEL", lockKey) end`
	if ok, err := cl.SetNX(ctx, "same", "tok", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	held := func() int {
		n := 0
		for _, m := range c.masters {
			if v, _ := m.Do("EXISTS", "same"); v == "1" {
				n++
			}
		}
		return n
	}
	if err := cl.Eval(ctx, body, []string{"same"}, "stranger").Err(); err != redis.Nil {
		t.Fatalf("a stranger's release: %v, want nil", err)
	}
	if n := held(); n != 3 {
		t.Fatalf("a stranger's release left the key on %d of 3 masters", n)
	}
	if err := cl.Eval(ctx, body, []string{"same"}, "tok").Err(); err != redis.Nil {
		t.Fatalf("the holder's release: %v, want nil", err)
	}
	if n := held(); n != 0 {
		t.Fatalf("the holder's release left the key on %d of 3 masters", n)
	}
}
