package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

const h69JSONAcquire = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], cjson.encode({owner = ARGV[1]}), 'PX', ARGV[2])
return 1`

const h69JSONRelease = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local lock = cjson.decode(raw)
if lock.owner == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

// TestH69JSONTokenWithSlash: a JSON lock (the analyzer's own variant
// scripts) whose token is base64 (has '/'): cjson.encode writes "\/", so
// lockproxy_holds does not find the token in the value.
func TestH69JSONTokenWithSlash(t *testing.T) {
	for _, tok := range []string{"abcd1234", "ab/cd+12=="} {
		t.Run(strings.ReplaceAll(tok, "/", "_"), func(t *testing.T) {
			c := startCluster(t, 3)
			ctx := context.Background()
			a := c.client()
			eval := func(body string, args ...any) (any, error) {
				var rep any
				var err error
				for i := 0; i < 50; i++ {
					rep, err = a.Eval(ctx, body, []string{"k"}, args...).Result()
					if err == nil || !strings.Contains(err.Error(), "analy") {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				return rep, err
			}
			rep, err := eval(h69JSONAcquire, tok, 20000)
			t.Logf("acquire %v %v; masters %v", rep, err, c.onMasters("k"))
			// Put the lock there directly (as another path would) and release.
			for _, m := range c.masters {
				m.Do("SET", "k", `{"owner":"`+strings.ReplaceAll(tok, "/", `\/`)+`"}`, "PX", "20000")
			}
			rep, err = eval(h69JSONRelease, tok)
			t.Logf("release %v %v; masters %v", rep, err, c.onMasters("k"))
			if err != nil || rep != int64(1) {
				t.Errorf("the holder's release answered %v %v", rep, err)
			}
		})
	}
}
