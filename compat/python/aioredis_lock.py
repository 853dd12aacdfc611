"""aioredis 1.3 (Debian's python3-aioredis 1.3.1) through lockproxy: the
lock flow asyncio code writes with it.

aioredis 1.3 has no Redis lock class (its aioredis.locks.Lock is an
asyncio.Lock for its own pool): asyncio services write the lock with its
commands, as below. Commands issued together on one connection go out
pipelined (aioredis writes each at once and matches replies in order), and
its pipeline() and multi_exec() batch them explicitly.

Run by compat/langs_test.go with Debian's interpreter, against one plain
redis-server and through lockproxy:

    /usr/bin/python3 aioredis_lock.py PORT PREFIX

Each "STEP name result" line is compared with the plain run's; at each
"CHECK ..." line the test reads the masters and answers "ok" (runDriven).
An assertion that fails exits 1 with the reason on stderr.
"""

import asyncio
import sys

import aioredis

PORT, PREFIX = int(sys.argv[1]), sys.argv[2]
URL = "redis://127.0.0.1:%d" % PORT


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


async def step(name, aw):
    """Awaits aw and prints its result, or the first word of the server's
    error (the error code: both servers' texts differ in detail)."""
    try:
        r = await aw
    except aioredis.RedisError as e:
        r = "error " + str(e).split()[0]
    print("STEP", name, repr(r), flush=True)
    return r


EXTEND = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


async def pttl_in(r, key, lo, hi):
    t = await r.pttl(key)
    return lo <= t <= hi


async def main():
    print("aioredis", aioredis.__version__, flush=True)
    key = PREFIX + "lock"
    tok, other = "aio-token-a", "aio-token-b"

    # Handshakes: a database and a password in the URL or as arguments
    # (SELECT and AUTH on connect), a pool, then the probes.
    c = await aioredis.create_redis(URL + "/0")
    await step("connect url db 0, ping", c.ping())
    c.close()
    await step("connect password, no requirepass", aioredis.create_redis(URL, password="secret"))
    r = await aioredis.create_redis_pool(URL, db=0, minsize=2, maxsize=4, encoding="utf-8")
    c2 = await aioredis.create_redis(URL, encoding="utf-8")
    await step("select 0", c2.select(0))
    await step("client setname", c2.client_setname("aio-named"))
    await step("client getname", c2.client_getname())
    info = await r.info("server")
    await step("info server has redis_version", asyncio.sleep(0, "redis_version" in info["server"]))
    await step("echo", r.echo("hi"))

    # The lock flow.
    expect(await step("set nx px", r.set(key, tok, pexpire=5000, exist=r.SET_IF_NOT_EXIST)) is True,
           "SET NX PX refused a free lock")
    check("held", key, tok)
    expect(await step("contender set nx px", c2.set(key, other, pexpire=5000, exist=c2.SET_IF_NOT_EXIST)) is False,
           "a contender got a held lock")
    # Five contenders at once on one connection: pipelined, all refused.
    await step("5 contenders gathered", asyncio.gather(
        *[c2.set(key, "%s-%d" % (other, i), pexpire=5000, exist=c2.SET_IF_NOT_EXIST) for i in range(5)]))
    await step("get, exists gathered", asyncio.gather(r.get(key), r.exists(key)))
    await step("pttl in 1000..5000", pttl_in(r, key, 1000, 5000))
    expect(await step("eval extend", r.eval(EXTEND, keys=[key], args=[tok, 8000])) == 1, "extend failed")
    check("pttl", key, 6000, 8000)
    await step("stranger's extend", c2.eval(EXTEND, keys=[key], args=[other, 9000]))
    await step("stranger's release", c2.eval(RELEASE, keys=[key], args=[other]))
    check("held", key, tok)
    sha = await step("script load", r.script_load(RELEASE))
    await step("script exists", r.script_exists(sha, "0" * 40))
    await step("evalsha of an unknown sha1", r.evalsha("0" * 40, keys=[key], args=[tok]))
    await step("stranger's evalsha release", c2.evalsha(sha, keys=[key], args=[other]))
    check("held", key, tok)

    # pipeline(): buffered, sent in one write by execute().
    p = r.pipeline()
    g, t, x = p.get(key), p.pttl(key), p.exists(key)
    await p.execute()
    await step("pipeline get, pttl, exists", asyncio.sleep(0, [await g, 1000 <= await t <= 8000, await x]))

    # A check-and-set release: WATCH, GET, then MULTI, DEL, EXEC.
    c3 = await aioredis.create_redis(URL, encoding="utf-8")
    await step("watch", c3.watch(key))
    expect(await step("get", c3.get(key)) == tok, "the holder read another value")
    tr = c3.multi_exec()
    d = tr.delete(key)
    await step("multi, del, exec", tr.execute())
    await step("queued del", d)
    check("gone", key)

    expect(await step("set nx ex", c2.set(key, other, expire=5, exist=c2.SET_IF_NOT_EXIST)) is True, "re-acquire failed")
    check("held", key, other)
    await step("evalsha release", c2.evalsha(sha, keys=[key], args=[other]))
    check("gone", key)
    await step("release again", c2.evalsha(sha, keys=[key], args=[other]))

    # A release wait: subscribed to the lock's channel, woken by the
    # releaser's PUBLISH; after UNSUBSCRIBE a PUBLISH reaches nobody.
    sub = await aioredis.create_redis(URL, encoding="utf-8")
    chan = PREFIX + "released"
    ch, = await sub.subscribe(chan)
    await step("publish the release", c2.publish(chan, "released"))
    await step("message", ch.get(encoding="utf-8"))
    await step("unsubscribe", sub.unsubscribe(chan))
    await step("publish to nobody", c2.publish(chan, "released"))
    sub.close()
    await sub.wait_closed()

    await step("quit", c3.quit())
    for conn in (r, c2, c3):
        conn.close()
        await conn.wait_closed()


asyncio.run(main())
