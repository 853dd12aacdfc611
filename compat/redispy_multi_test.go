package compat

import (
	"os/exec"
	"testing"
)

// redisPyMulti is redis-py's pipeline(transaction=True), as rq and lock
// code send it: MULTI, the commands, EXEC in one write. One lock command
// runs (True, then None once held); two are refused as a whole
// (redis-py raises the queue-time refusal; EXEC answered EXECABORT)
// and nothing is taken.
const redisPyMulti = `
import sys, redis
from redis.exceptions import ResponseError
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
k = sys.argv[2] + "multi"
p = r.pipeline(transaction=True)
p.set(k, "tok", nx=True, px=30000)
assert p.execute() == [True], "first"
p = r.pipeline(transaction=True)
p.set(k, "other", nx=True, px=30000)
p.ping()
assert p.execute() == [None, True], "held"
p = r.pipeline(transaction=True)
p.set(k + "2", "t", nx=True, px=30000)
p.expire(k, 60)
try:
    p.execute()
    sys.exit("two lock commands ran")
except ResponseError as e:  # redis-py raises the queue-time refusal
    assert "at most one lock command" in str(e), str(e)
assert r.exists(k + "2") == 0, "an aborted transaction took a lock"
assert r.delete(k) == 1
`

// TestRedisPyTransactionPipeline: before MULTI without WATCH was
// accepted, the first pipeline took the lock and raised.
func TestRedisPyTransactionPipeline(t *testing.T) {
	t.Parallel()
	requirePythonRedis(t)
	e := setup(t)
	out, err := exec.Command(debianPython, "-c", redisPyMulti, port(e.addr), prefixOf(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py pipeline(transaction=True): %v\n%s", err, out)
	}
	must(t, e.checkKeys(t, prefixOf(t)))
}
