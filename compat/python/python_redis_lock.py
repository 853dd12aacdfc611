"""python-redis-lock 4.0.1, unmodified (vendor/redis_lock), through lockproxy.

Run by compat/python_redis_lock_test.go with Debian's interpreter and its
python3-redis:

    /usr/bin/python3 python_redis_lock.py PORT_A PORT_B PREFIX

PORT_A and PORT_B are two lockproxies on the same masters (or one plain
redis-server given twice), PREFIX the test's key prefix. The library keeps
a lock in "lock:<name>" and wakes its blocked acquirers through the signal
list "lock-signal:<name>": release and reset push on it (their scripts),
and a blocked acquire() waits in BLPOP on it, then tries SET NX again.
Through lockproxy the BLPOP is parked on the proxy and woken by the push,
decided on a quorum by whichever proxy ran the release.

At each "CHECK ..." line the Go test looks at the masters and answers "ok"
(see runDriven); "MEASURED ..." lines carry the figures the test reports.
Any failed assertion exits 1 with the reason on stderr.
"""

import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor"))

import redis  # noqa: E402 - after the vendor path
import redis_lock  # noqa: E402

# A handoff is the time from the holder's release() call to the blocked
# waiter's acquire() returning True. Without a wake-up the waiter would sleep
# to the end of its BLPOP (WAIT seconds), so the bound is far below that,
# and far above what a loaded 2-core machine under -race needs.
WAIT = 5
HANDOFF_BOUND = 0.5
HANDOFFS = 6


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    os._exit(1)  # also from a waiter's thread


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


def blocked(client):
    return client.info("clients")["blocked_clients"]


def wait_blocked(client, n):
    """Waits until n clients are blocked (in BLPOP) on client's server."""
    deadline = time.monotonic() + 10
    while blocked(client) != n:
        expect(time.monotonic() < deadline, "%d clients blocked after 10s, want %d" % (blocked(client), n))
        time.sleep(0.005)


class Waiter(threading.Thread):
    """acquire(blocking=True, timeout) in a thread, timed."""

    def __init__(self, lock, timeout):
        super().__init__(daemon=True)
        self.lock, self.timeout = lock, timeout
        self.got, self.at = None, None

    def run(self):
        self.got = self.lock.acquire(blocking=True, timeout=self.timeout)
        self.at = time.monotonic()


def main():
    port_a, port_b, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    print("python-redis-lock", redis_lock.__version__, "redis-py", redis.__version__, flush=True)
    expect(redis_lock.__version__ == "4.0.1", "vendored python-redis-lock is %s, want 4.0.1" % redis_lock.__version__)
    # One client per proxy, as two processes would have. No socket timeout:
    # a BLPOP blocks for up to WAIT seconds; the Go test kills a hung run.
    a = redis.StrictRedis(host="127.0.0.1", port=port_a)
    b = redis.StrictRedis(host="127.0.0.1", port=port_b)
    name = prefix + "res"
    key, signal = "lock:" + name, "lock-signal:" + name

    # Handoffs: the holder releases through one proxy, the waiter blocked on
    # the other gets the lock; each way round, HANDOFFS times.
    gaps = []
    for i in range(HANDOFFS):
        hc, wc = (a, b) if i % 2 == 0 else (b, a)
        holder = redis_lock.Lock(hc, name, expire=10)
        expect(holder.acquire(blocking=False), "handoff %d: the free lock was refused" % i)
        if i == 0:
            check("held", key, holder.id)
            check("pttl", key, 9000, 10000)
        w = Waiter(redis_lock.Lock(wc, name, expire=10), WAIT)
        w.start()
        wait_blocked(wc, 1)
        expect(w.got is None, "handoff %d: the waiter returned while the lock was held" % i)
        t0 = time.monotonic()
        holder.release()
        released = time.monotonic() - t0
        w.join(WAIT + 5)
        expect(w.got is True, "handoff %d: blocked acquire returned %r, want True" % (i, w.got))
        gaps.append(w.at - t0)
        print("MEASURED handoff %d: release() took %.1f ms, waiter acquired %.1f ms after the release call" % (i, released * 1e3, (w.at - t0) * 1e3), flush=True)
        # "granted": the waiter's SET NX may reach a master before the
        # release, decided on a quorum, has run there (checkGranted).
        check("granted", key, w.lock.id)
        expect(holder.get_owner_id() == w.lock.id, "handoff %d: get_owner_id() is not the waiter's" % i)
        raises(redis_lock.NotAcquired, holder.release, "handoff %d: the old holder's second release" % i)
        w.lock.release()
    check("gone", key)
    print("MEASURED handoff release→acquire over %d: min %.1f ms, median %.1f ms, max %.1f ms" % (
        len(gaps), min(gaps) * 1e3, statistics.median(gaps) * 1e3, max(gaps) * 1e3), flush=True)
    slow = [g for g in gaps if g >= HANDOFF_BOUND]
    expect(not slow, "handoffs of %s ms, want each under %d ms" % ([round(g * 1e3) for g in slow], HANDOFF_BOUND * 1e3))

    # Timeout: nobody releases, so the blocked acquire gives up after its
    # timeout (whole seconds: the library passes int(timeout) to BLPOP).
    holder = redis_lock.Lock(a, name, expire=10)
    expect(holder.acquire(blocking=False), "the free lock was refused")
    t0 = time.monotonic()
    expect(redis_lock.Lock(b, name, expire=10).acquire(blocking=True, timeout=1) is False,
           "blocked acquire of a held lock did not time out with False")
    waited = time.monotonic() - t0
    print("MEASURED timeout=1: acquire returned False after %.0f ms" % (waited * 1e3), flush=True)
    expect(0.9 <= waited < 3, "acquire(timeout=1) gave up after %.3fs" % waited)
    expect(blocked(b) == 0, "a client is still blocked after the timeout")
    check("held", key, holder.id)

    # extend: the holder's moves the TTL (the library's EXPIRE, in seconds);
    # a stranger's (another id) raises NotAcquired and changes nothing.
    holder.extend(30)
    check("pttl", key, 29000, 30000)
    raises(redis_lock.NotAcquired, lambda: redis_lock.Lock(b, name, id="stranger").extend(5), "a stranger's extend")
    raises(redis_lock.NotAcquired, lambda: redis_lock.Lock(b, name, id="stranger").release(), "a stranger's release")
    check("held", key, holder.id)
    check("pttl", key, 28000, 30000)
    expect(redis_lock.Lock(b, name).locked(), "locked() is False while held")

    # reset: deletes the lock whoever holds it, and its push wakes a waiter
    # blocked on the other proxy.
    w = Waiter(redis_lock.Lock(a, name, expire=10), WAIT)
    w.start()
    wait_blocked(a, 1)
    t0 = time.monotonic()
    redis_lock.Lock(b, name).reset()
    w.join(WAIT + 5)
    expect(w.got is True, "blocked acquire after reset() returned %r, want True" % w.got)
    print("MEASURED reset→acquire: %.1f ms" % ((w.at - t0) * 1e3), flush=True)
    check("granted", key, w.lock.id)
    raises(redis_lock.NotAcquired, holder.release, "the holder's release after a reset")
    w.lock.release()

    # Contention: two workers, one per proxy, take the lock in turn; each
    # records when it held it. No two windows may overlap.
    windows, lock = [], threading.Lock()

    def worker(client, wid):
        for r in range(4):
            lk = redis_lock.Lock(client, name, expire=10)
            expect(lk.acquire(blocking=True, timeout=WAIT), "worker %d round %d: acquire gave up" % (wid, r))
            start = time.monotonic()
            time.sleep(0.02)
            end = time.monotonic()
            lk.release()
            with lock:
                windows.append((start, end, wid))
            time.sleep(0.01)

    workers = [threading.Thread(target=worker, args=(c, i), daemon=True) for i, c in enumerate((a, b))]
    for t in workers:
        t.start()
    for t in workers:
        t.join(60)
        expect(not t.is_alive(), "a contending worker is stuck")
    windows.sort()
    expect(len(windows) == 8, "%d holdings, want 8" % len(windows))
    for prev, cur in zip(windows, windows[1:]):
        expect(prev[1] <= cur[0], "two holders at once: %r and %r" % (prev, cur))
    check("gone", key)
    check("keys", "lock:" + prefix)
    print("python-redis-lock: all assertions passed", flush=True)


if __name__ == "__main__":
    main()
