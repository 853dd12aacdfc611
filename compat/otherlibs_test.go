package compat

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/pelletier/go-toml/v2"
	"github.com/redis/go-redis/v9"
)

// Scripts of lock libraries that are not in the built-in catalog's
// sources, written the way those libraries and their users write them.
// Each is either recognized as a catalogued script (same meaning, other
// formatting) or refused with an error that says how to register it.
const (
	// Laravel's cache lock release (LuaScripts::releaseLock).
	laravelRelease = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend"
	// RedLock.net's release, single quotes and two-space indent.
	redlockNetRelease = "if redis.call('get', KEYS[1]) == ARGV[1] then\n  return redis.call('del', KEYS[1])\nelse\n  return 0\nend"
	// A Rust-style unlock with upper-case commands.
	upperUnlock = "if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n  return redis.call(\"DEL\", KEYS[1])\nelse\n  return 0\nend"
	// A Windows editor's copy with a comment, CRLF, pcall and semicolons.
	windowsExtend = "-- extend our lock\r\nif redis.pcall('GET', KEYS[1]) == ARGV[1] then\r\n\treturn redis.pcall('PEXPIRE', KEYS[1], ARGV[2]);\r\nelse\r\n\treturn 0;\r\nend;\r\n"
	// A one-line acquire as tutorials write it.
	tutorialAcquire = `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`
	// A compare-and-PTTL read with long-bracket strings.
	bracketPTTL = `if redis.call([[get]], KEYS[1]) == ARGV[1] then return redis.call([[pttl]], KEYS[1]) else return -3 end`

	// Not catalogued: a compare-and-delete with UNLINK, understood by what
	// it does.
	unlinkRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("unlink", KEYS[1]) else return 0 end`
)

// docScripts decodes the [[scripts]] example of docs/compat.md, so the
// documented configuration is the one tested.
func docScripts(t *testing.T) []catalog.ScriptConfig {
	t.Helper()
	doc := docTOML(t)
	var cfg struct {
		Scripts []catalog.ScriptConfig `toml:"scripts"`
	}
	dec := toml.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("docs/compat.md's config.toml example: %v", err)
	}
	if len(cfg.Scripts) != 3 {
		t.Fatalf("docs/compat.md's example has %d [[scripts]], the test expects 3", len(cfg.Scripts))
	}
	return cfg.Scripts
}

func sha1Of(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestOtherLibrariesScripts sends, as a new user would, scripts of other
// lock libraries of the catalogued families: those that mean what a
// catalogued script means are recognized and voted on; the others are
// refused, with their sha1 and how to register them, and never reach a
// master. Registered as docs/compat.md shows, they then work.
func TestOtherLibrariesScripts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	prefix := prefixOf(t)
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	t.Cleanup(func() { c.Close() })
	key := prefix + "lock"

	acquire := func(c *redis.Client, tok string) {
		t.Helper()
		if ok, err := c.SetNX(ctx, key, tok, 5*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX PX: %v, %v", ok, err)
		}
		must(t, e.checkHeld(t, key, tok))
	}
	eval := func(c *redis.Client, body string, args ...interface{}) (interface{}, error) {
		return c.Eval(ctx, body, []string{key}, args...).Result()
	}

	// Recognized: they work as their catalogued twins.
	for _, body := range []string{laravelRelease, redlockNetRelease, upperUnlock} {
		acquire(c, "tok")
		if v, err := eval(c, body, "stranger"); v != int64(0) || err != nil {
			t.Fatalf("%q with a stranger's token = %v, %v; want 0", body, v, err)
		}
		must(t, e.checkHeld(t, key, "tok"))
		if v, err := eval(c, body, "tok"); v != int64(1) || err != nil {
			t.Fatalf("%q = %v, %v; want 1", body, v, err)
		}
		must(t, e.checkGone(t, key))
	}
	if v, err := eval(c, tutorialAcquire, "tok", 5000); v != "OK" || err != nil {
		t.Fatalf("tutorial acquire = %v, %v", v, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if _, err := eval(c, tutorialAcquire, "other", 5000); err != redis.Nil {
		t.Fatalf("tutorial acquire of a held key: %v, want nil", err)
	}
	if v, err := eval(c, windowsExtend, "tok", 9000); v != int64(1) || err != nil {
		t.Fatalf("CRLF/pcall extend = %v, %v", v, err)
	}
	must(t, e.checkPTTL(t, key, 8000, 9000))
	if v, err := eval(c, bracketPTTL, "tok"); err != nil || v.(int64) < 8000 || v.(int64) > 9000 {
		t.Fatalf("long-bracket compare-and-PTTL = %v, %v", v, err)
	}
	if v, err := eval(c, bracketPTTL, "other"); v != int64(-3) || err != nil {
		t.Fatalf("long-bracket compare-and-PTTL, not ours = %v, %v; want -3", v, err)
	}

	// Scripts that are not lock scripts are refused, never forwarded: the
	// key is untouched on every master.
	docs := docScripts(t)
	refused := []string{
		`redis.call("flushall") return 1`,
		`return redis.call("get", KEYS[1] .. ":x")`,
		`redis.call("select", 1) return redis.call("del", KEYS[1])`,
	}
	for _, body := range refused {
		_, err := eval(c, body, "tok", 5000, "yes")
		if err == nil || !strings.Contains(err.Error(), sha1Of(body)) || !strings.Contains(err.Error(), "[[scripts]] in config.toml") {
			t.Fatalf("EVAL of an unknown script %q: %v; want an error with its sha1 and how to register it", body, err)
		}
		if _, err := c.EvalSha(ctx, sha1Of(body), []string{key}, "tok", 5000, "yes").Result(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			t.Fatalf("EVALSHA of an unknown script: %v, want NOSCRIPT", err)
		}
		must(t, e.checkHeld(t, key, "tok"))
		must(t, e.checkPTTL(t, key, 7000, 9000))
	}
	if v, err := eval(c, unlinkRelease, "other"); v != int64(0) || err != nil {
		t.Fatalf("UNLINK release of another's token = %v, %v; want 0", v, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if v, err := eval(c, laravelRelease, "tok"); v != int64(1) || err != nil {
		t.Fatalf("release = %v, %v", v, err)
	}
	must(t, e.checkGone(t, key))

	// Registered as the docs show, on a lockproxy of their own.
	custom := redis.NewClient(&redis.Options{Addr: e.proxyFor(t, proxy.Config{}, docs)})
	t.Cleanup(func() { custom.Close() })
	lock, extend, release := docs[0].Body, docs[1].Body, docs[2].Body
	// redlock-rb style: acquire when absent (ARGV[3] "yes"), refuse another
	// token, re-acquire our own.
	if v, err := eval(custom, lock, "tok", 3000, "yes"); v != "OK" || err != nil {
		t.Fatalf("registered acquire = %v, %v", v, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	must(t, e.checkPTTL(t, key, 2000, 3000))
	if _, err := eval(custom, lock, "other", 3000, "yes"); err != redis.Nil {
		t.Fatalf("registered acquire of a held key: %v, want nil", err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if v, err := eval(custom, lock, "tok", 6000, "no"); v != "OK" || err != nil {
		t.Fatalf("registered re-acquire of our own lock = %v, %v", v, err)
	}
	must(t, e.checkPTTL(t, key, 5000, 6000))
	// Extend through SET PX: ours → 1 and the TTL moves; a stranger's → 0.
	if v, err := eval(custom, extend, "tok", 9000); v != int64(1) || err != nil {
		t.Fatalf("registered extend = %v, %v", v, err)
	}
	must(t, e.checkPTTL(t, key, 8000, 9000))
	if v, err := eval(custom, extend, "other", 20000); v != int64(0) || err != nil {
		t.Fatalf("registered extend with a stranger's token = %v, %v; want 0", v, err)
	}
	must(t, e.checkPTTL(t, key, 7000, 9000))
	// EVALSHA of the registered bodies works before any EVAL on a new
	// connection: the masters have them loaded.
	if v, err := custom.EvalSha(ctx, sha1Of(release), []string{key}, "other").Result(); v != int64(0) || err != nil {
		t.Fatalf("registered release by EVALSHA with a stranger's token = %v, %v; want 0", v, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if v, err := custom.EvalSha(ctx, sha1Of(release), []string{key}, "tok").Result(); v != int64(1) || err != nil {
		t.Fatalf("registered release by EVALSHA = %v, %v", v, err)
	}
	must(t, e.checkGone(t, key))
	// A lockproxy without the [[scripts]] entry understands the same
	// release by what it does: the lock is gone, so it answers 0.
	if v, err := eval(c, release, "tok"); v != int64(0) || err != nil {
		t.Fatalf("unregistered release of a lock nobody holds = %v, %v; want 0", v, err)
	}
	must(t, e.checkKeys(t, prefix))
}
