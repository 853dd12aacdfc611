// redis-semaphore 5.8.0's Mutex or RedlockMutex with one ioredis client.
// Run by compat/libs_test.go:
//
//   node redis_semaphore.js PORT PREFIX mutex|redlock
//
// RedlockMutex gets a one-element client array: lockproxy is the quorum.
// Both keep the lock at "mutex:" + the name they are given; they acquire
// with SET NX PX, extend and release with Lua scripts.
"use strict";

const Redis = require("ioredis");
const { Mutex, RedlockMutex, TimeoutError } = require("redis-semaphore");
const { check, expect, fail, main, rejects, sleep } = require("./driver");

main(async () => {
  const [port, prefix, variant] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
  const client = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const make = {
    mutex: (name, opts) => new Mutex(client, name, opts),
    redlock: (name, opts) => new RedlockMutex([client], name, opts),
  }[variant];
  if (!make) fail(`unknown variant ${variant}, want mutex or redlock`);
  const name = prefix + "lock";
  const key = "mutex:" + name;
  // No automatic refresh unless a step asks for it: each extend is explicit.
  const manual = { lockTimeout: 10000, refreshInterval: 0, acquireAttemptsLimit: 1 };

  // Acquire: the key holds the identifier with the lock's TTL.
  const a = make(name, manual);
  expect(await a.tryAcquire(), "tryAcquire of a free mutex returned false");
  expect(a.isAcquired, "isAcquired is false after tryAcquire");
  await check("held", key, a.identifier);
  await check("pttl", key, 9000, 10000);

  // Refused while held: tryAcquire answers false, acquire times out.
  const b = make(name, { ...manual, acquireAttemptsLimit: Infinity, acquireTimeout: 300, retryInterval: 50 });
  await rejects(b.acquire(), TimeoutError, "acquire of a held mutex");
  expect(!(await make(name, manual).tryAcquire()), "tryAcquire of a held mutex returned true");
  await check("held", key, a.identifier);

  // A stranger's refresh and release do nothing (a stranger is a mutex
  // whose identifier is not the holder's, "acquired externally": its
  // tryAcquire refreshes instead of acquiring).
  await check("shorten", key, 3000);
  const stranger = make(name, { ...manual, identifier: "stranger", acquiredExternally: true });
  expect(!(await stranger.tryAcquire()), "a stranger's refresh returned true");
  await stranger.release();
  await check("held", key, a.identifier);
  await check("pttl", key, 1, 3000);

  // Extend: the holder's identifier, acquired externally, refreshes the
  // lock back to its full TTL.
  const holder = make(name, { ...manual, identifier: a.identifier, acquiredExternally: true });
  expect(await holder.tryAcquire(), "the holder's refresh returned false");
  await check("held", key, a.identifier);
  await check("pttl", key, 9000, 10000);

  // Release; then the mutex refused above gets it.
  await a.release();
  expect(!a.isAcquired, "isAcquired is true after release");
  await check("gone", key);
  expect(await b.tryAcquire(), "tryAcquire after release returned false");
  await check("held", key, b.identifier);
  await b.release();
  await check("gone", key);

  // Expiry: a lock nobody refreshes expires after its TTL, and a waiting
  // mutex gets it then; the expired holder's release leaves it alone.
  const short = make(name, { ...manual, lockTimeout: 800 });
  expect(await short.tryAcquire(), "tryAcquire of a free mutex returned false");
  await check("held", key, short.identifier);
  await check("pttl", key, 1, 800);
  const waiter = make(name, { ...manual, acquireAttemptsLimit: Infinity, acquireTimeout: 3000, retryInterval: 50 });
  const start = Date.now();
  await waiter.acquire();
  expect(Date.now() - start >= 400, `waiter got a mutex held for 800ms after ${Date.now() - start}ms`);
  // "granted", not "held": the expired lock's keys vanish from the masters
  // at slightly different moments (each was written at its own), so a
  // retry in between is granted by a quorum and refused where the old key
  // was still there; the lock then lives on a quorum only, as Redlock's.
  await check("granted", key, waiter.identifier);
  await short.release();
  await check("granted", key, waiter.identifier);
  await waiter.release();
  await check("gone", key);

  // Automatic refresh: a 1s lock refreshed every 200ms outlives its TTL.
  const auto = make(name, {
    lockTimeout: 1000,
    refreshInterval: 200,
    onLockLost: (err) => fail(`automatically refreshed lock lost: ${err}`),
  });
  await auto.acquire();
  await sleep(1600);
  expect(auto.isAcquired, "automatically refreshed lock is not acquired after 1.6s");
  await check("held", key, auto.identifier);
  await check("pttl", key, 500, 1000);
  await auto.release();
  await check("gone", key);

  await check("keys", key);
  await client.quit();
  console.log(`redis-semaphore ${variant}: all assertions passed`);
});
