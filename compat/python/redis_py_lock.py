"""redis-py's redis.lock.Lock, unmodified, through lockproxy.

Run by compat/redispy_test.go with Debian's interpreter and package:

    /usr/bin/python3 redis_py_lock.py PORT PREFIX

PORT is lockproxy's port on 127.0.0.1 and PREFIX the test's key prefix. At
each "CHECK ..." line the Go test looks at the masters themselves and
answers "ok" on stdin (see runDriven). Any assertion that fails exits 1
with the reason on stderr.
"""

import sys
import threading
import time

import redis
from redis.exceptions import LockError, LockNotOwnedError


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def check(*args):
    print("CHECK", *args, flush=True)
    answer = sys.stdin.readline().strip()
    if answer != "ok":
        fail("checkpoint %s: test answered %r" % (" ".join(map(str, args)), answer))


def raises(exc, fn, what):
    try:
        fn()
    except exc:
        return
    except Exception as e:  # noqa: BLE001 - report what was raised instead
        fail("%s raised %r, want %s" % (what, e, exc.__name__))
    fail("%s raised nothing, want %s" % (what, exc.__name__))


def main():
    port, prefix = int(sys.argv[1]), sys.argv[2]
    print("redis-py", redis.__version__, flush=True)
    # Two clients, as two processes would have: each its own connections.
    c1 = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    c2 = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    expect(c1.ping(), "PING")
    name = prefix + "lock"

    # Acquire: SET NX PX through the quorum.
    a = c1.lock(name, timeout=5)
    expect(a.acquire(blocking=False), "first acquire failed")
    tok = a.local.token.decode()
    check("held", name, tok)
    expect(a.locked(), "locked() is False while held")
    expect(a.owned(), "owned() is False for the holder")

    # A second locker is refused while the lock is held, without and with
    # a blocking timeout.
    # thread_local=False: b is released from another thread below.
    b = c2.lock(name, timeout=5, thread_local=False)
    expect(not b.acquire(blocking=False), "second locker acquired a held lock")
    t0 = time.monotonic()
    expect(not b.acquire(blocking=True, blocking_timeout=0.3), "blocking acquire got a held lock")
    waited = time.monotonic() - t0
    # redis-py gives up when its next try (every sleep=0.1s) would be past
    # the timeout: after 0.2s here.
    expect(0.15 <= waited < 2, "blocking acquire gave up after %.3fs, want 0.2-0.3s" % waited)
    expect(b.locked(), "locked() is False for the second locker")
    expect(not b.owned(), "owned() is True for a locker that does not hold it")
    check("held", name, tok)

    # extend: additive (timeout 5s + 10s), then replace (3s).
    expect(a.extend(10), "extend(10) returned False")
    check("pttl", name, 13000, 15000)
    expect(a.extend(3, replace_ttl=True), "extend(3, replace_ttl=True) returned False")
    check("pttl", name, 2000, 3000)
    # reacquire: back to the lock's own timeout (5s).
    expect(a.reacquire(), "reacquire() returned False")
    check("pttl", name, 4000, 5000)

    # A stranger's token cannot release, extend or reacquire it.
    raises(LockNotOwnedError, lambda: b.do_release(b"stranger"), "release with a stranger's token")
    b.local.token = b"stranger"
    raises(LockNotOwnedError, lambda: b.extend(10), "extend with a stranger's token")
    raises(LockNotOwnedError, lambda: b.reacquire(), "reacquire with a stranger's token")
    b.local.token = None
    check("held", name, tok)
    check("pttl", name, 3000, 5000)

    # Release; a second release of the same token is LockNotOwnedError, and
    # release() of an unlocked Lock is LockError.
    a.release()
    check("gone", name)
    expect(not a.locked(), "locked() is True after release")
    raises(LockNotOwnedError, lambda: a.do_release(tok.encode()), "second release of the same token")
    raises(LockError, a.release, "release() of an unlocked Lock")

    # After the release another locker succeeds.
    expect(b.acquire(blocking=False), "acquire after release failed")
    tok_b = b.local.token.decode()
    check("held", name, tok_b)

    # Blocking acquire that succeeds: b's lock is released by another thread
    # while a waits for it.
    def release_soon():
        time.sleep(0.2)
        b.release()

    releaser = threading.Thread(target=release_soon)
    releaser.start()
    t0 = time.monotonic()
    expect(a.acquire(blocking=True, blocking_timeout=3), "blocking acquire did not get a released lock")
    releaser.join()
    waited = time.monotonic() - t0
    expect(0.15 <= waited < 3, "blocking acquire took %.3fs" % waited)
    tok = a.local.token.decode()
    check("held", name, tok)

    # The old holder's lock expires: a lock with a short timeout is taken
    # over by another locker once it expired; the old holder then owns
    # nothing and its release is LockNotOwnedError.
    a.release()
    short = c1.lock(name, timeout=0.6)
    expect(short.acquire(blocking=False), "acquire with timeout 0.6s failed")
    check("pttl", name, 1, 600)
    taker = c2.lock(name, timeout=5)
    expect(taker.acquire(blocking=True, blocking_timeout=3), "no one got the lock after it expired")
    tok_t = taker.local.token.decode()
    # "granted", not "held": the expired lock's keys vanish from the
    # masters at slightly different moments, so a retry in between is
    # granted by a quorum and refused where the old key was still there.
    check("granted", name, tok_t)
    expect(not short.owned(), "expired holder still owns the lock")
    raises(LockNotOwnedError, short.release, "release of an expired lock taken by another")
    check("granted", name, tok_t)

    # The context manager form.
    taker.release()
    with c1.lock(name, timeout=5, blocking_timeout=1) as ctx:
        check("held", name, ctx.local.token.decode())
    check("gone", name)
    check("keys", prefix)
    print("redis-py: all assertions passed", flush=True)


if __name__ == "__main__":
    main()
