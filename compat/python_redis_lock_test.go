package compat

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// vendoredRedisLock is python-redis-lock 4.0.1's module, copied unchanged
// from its repository (python/vendor/README.md says from where): PyPI is
// not reachable from CI, and Debian does not package it.
var vendoredRedisLock = filepath.Join("python", "vendor", "redis_lock", "__init__.py")

// vendoredRedisLockBlob is the git blob id of src/redis_lock/__init__.py at
// the tag v4.0.1 of github.com/ionelmc/python-redis-lock.
const vendoredRedisLockBlob = "117405130ff14d91b1a3af729c75847c8198c55c"

// TestPythonRedisLock runs python-redis-lock's Lock (python/
// python_redis_lock.py) with two clients on two lockproxies in front of
// the same masters: a blocked acquire() (BLPOP on the signal list) on one
// proxy gets the lock as soon as the holder's release() (or a reset())
// through the other proxy pushes the signal, each way round; a blocked
// acquire with a timeout gives up with False when nobody releases; extend
// and a stranger's extend and release; two workers contending through
// both proxies never hold it at once. "plain" runs the same driver against
// one redis-server (both clients on it).
func TestPythonRedisLock(t *testing.T) {
	t.Parallel()
	requirePythonRedis(t)
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		e := ownRedis(t)
		e.runPythonRedisLock(t, e.addr, e.addr)
	})
	t.Run("lockproxy", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		a := e.proxyFor(t, proxy.Config{}, nil)
		b := e.proxyFor(t, proxy.Config{}, nil)
		e.runPythonRedisLock(t, a, b)
	})
}

func (e *env) runPythonRedisLock(t *testing.T, a, b string) {
	t.Helper()
	e.runDriven(t, 60*time.Second, debianPython, filepath.Join("python", "python_redis_lock.py"), port(a), port(b), prefixOf(t))
	// The signal list lives signal_expire (1s) after the last release.
	must(t, e.checkKeys(t, "lock:"+prefixOf(t)))
	must(t, e.checkKeys(t, "lock-signal:"+prefixOf(t)))
}

// TestPythonRedisLockVendored: the vendored module is the released one,
// byte for byte (a local edit would test something no user runs).
func TestPythonRedisLockVendored(t *testing.T) {
	b, err := os.ReadFile(vendoredRedisLock)
	if err != nil {
		t.Fatal(err)
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	if got := hex.EncodeToString(h.Sum(nil)); got != vendoredRedisLockBlob {
		t.Fatalf("%s has git blob id %s, want %s (python-redis-lock v4.0.1's): restore it from the tag", vendoredRedisLock, got, vendoredRedisLockBlob)
	}
}
