package compat

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// debianPython is the interpreter the suite runs redis-py with: Debian's,
// with Debian's python3-redis, not whatever python3 is first on PATH (a
// pyenv or venv interpreter without the package).
const debianPython = "/usr/bin/python3"

// requirePythonRedis fails t (never skips) when Debian's python3 or its
// redis package is missing, saying how to install them.
func requirePythonRedis(t *testing.T) {
	t.Helper()
	out, err := exec.Command(debianPython, "-c", "import redis, redis.lock; print(redis.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py for %s is missing (%v: %s); install it with:\n  apt-get install -y python3 python3-redis\n(.ci/run installs it)", debianPython, err, strings.TrimSpace(string(out)))
	}
	t.Logf("%s: redis-py %s", debianPython, strings.TrimSpace(string(out)))
}

// TestRedisPyLock runs redis-py's redis.lock.Lock through lockproxy:
// acquire, blocking acquire with a timeout (refused and granted), locked
// and owned, extend (add and replace), reacquire, release,
// LockNotOwnedError on a second release and on a stranger's token, and
// takeover after expiry (python/redis_py_lock.py).
func TestRedisPyLock(t *testing.T) {
	t.Parallel()
	requirePythonRedis(t)
	e := setup(t)
	e.runDriven(t, 30*time.Second, debianPython, "python/redis_py_lock.py", port(e.addr), prefixOf(t))
	must(t, e.checkKeys(t, prefixOf(t)))
}
