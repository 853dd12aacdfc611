"""django-redis (Debian's python3-django-redis 5.2, on Django 3.2 and
python3-redis 4.3) through lockproxy: cache.lock(), which hands redis-py's
Lock the cache's key, and the cache.add() lock of Celery's documentation
(add with a timeout, delete when done), both unmodified.

Run by compat/langs_test.go with Debian's interpreter, against one plain
redis-server and through lockproxy:

    /usr/bin/python3 django_redis_lock.py PORT PREFIX

Each "STEP name result" line is compared with the plain run's; at each
"CHECK ..." line the test reads the masters and answers "ok" (runDriven).
An assertion that fails exits 1 with the reason on stderr.
"""

import sys

import django
from django.conf import settings

PORT, PREFIX = int(sys.argv[1]), sys.argv[2]
URL = "redis://127.0.0.1:%d/0" % PORT
settings.configure(CACHES={
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": URL,
        "KEY_PREFIX": PREFIX.rstrip(":"),
        "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5},
    },
    "other": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": URL,
        "KEY_PREFIX": PREFIX.rstrip(":"),
    },
    # django-redis keeps one connection pool per LOCATION, the first
    # cache's: a password needs its own URL.
    "password": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": URL + "?socket_timeout=5",
        "OPTIONS": {"PASSWORD": "secret"},
    },
})
django.setup()

import django_redis  # noqa: E402 - after settings
import redis  # noqa: E402
from django.core.cache import caches  # noqa: E402
from redis.exceptions import LockError, RedisError  # noqa: E402


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


def step(name, f):
    """Runs f and prints its result, or the class of what it raised and the
    error code (both servers' texts differ in detail)."""
    try:
        r = f()
    except (RedisError, LockError) as e:
        r = "raised %s %s" % (type(e).__name__, (str(e).split() or [""])[0])
    print("STEP", name, repr(r), flush=True)
    return r


print("django-redis", django_redis.__version__, "Django", django.get_version(), "redis-py", redis.__version__, flush=True)
cache, other = caches["default"], caches["other"]
key = PREFIX.rstrip(":") + ":1:orders"  # KEY_PREFIX:VERSION:key, django's make_key

step("password, no requirepass", lambda: caches["password"].get("x"))
step("client ping", lambda: cache.client.get_client().ping())

# cache.lock(): redis-py's Lock on the cache's key, a token per lock.
lock = cache.lock("orders", timeout=10)
expect(step("lock acquire", lambda: lock.acquire(blocking=False)) is True, "cache.lock() refused a free lock")
token = lock.local.token.decode()
check("held", key, token)
contender = other.lock("orders", timeout=10)
expect(step("contender's acquire", lambda: contender.acquire(blocking=False)) is False, "a contender got a held lock")
step("contender's acquire, blocking_timeout 0.3", lambda: contender.acquire(blocking_timeout=0.3))
step("locked, owned", lambda: (lock.locked(), lock.owned(), contender.owned()))
step("extend 5", lambda: lock.extend(5))
check("pttl", key, 13000, 15000)
step("reacquire", lambda: lock.reacquire())
check("pttl", key, 9000, 10000)
step("contender's release", lambda: contender.release())
check("held", key, token)
step("release", lambda: lock.release())
check("gone", key)
step("release again", lambda: lock.release())
redis_lock = cache.lock("orders", timeout=10)
with redis_lock:
    check("held", key, redis_lock.local.token.decode())
check("gone", key)
cache.delete("orders")

# Celery's documented task lock: cache.add(lock_id, value, timeout), then
# cache.delete(lock_id) when the task is done. add is SET NX PX.
expect(step("cache.add", lambda: cache.add("orders", "worker-1", timeout=10)) is True, "cache.add refused a free key")
check("pttl", key, 9000, 10000)
step("contender's cache.add", lambda: other.add("orders", "worker-2", timeout=10))
step("cache.get", lambda: cache.get("orders"))
step("cache.ttl", lambda: cache.ttl("orders") in (9, 10))
step("cache.touch 20", lambda: cache.touch("orders", 20))
check("pttl", key, 19000, 20000)
step("cache.delete", lambda: cache.delete("orders"))
check("gone", key)
