// ioredis-lock 4.0.0 with ioredis pointed at lockproxy. Run by
// compat/node_test.go:
//
//   node ioredis_lock.js PORT PREFIX
"use strict";

const Redis = require("ioredis");
const redislock = require("ioredis-lock");
const { LockAcquisitionError, LockExtendError, LockReleaseError } = redislock;
const { check, expect, main, rejects } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const client = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const key = prefix + "lock";

  const l1 = redislock.createLock(client, { timeout: 5000, retries: 0, delay: 50 });
  await l1.acquire(key);
  await check("held", key, l1._id);
  await check("pttl", key, 4000, 5000);

  const l2 = redislock.createLock(client, { timeout: 5000, retries: 0, delay: 50 });
  await rejects(l2.acquire(key), LockAcquisitionError, "acquire of a held lock");
  await check("held", key, l1._id);

  await l1.extend(10000);
  await check("pttl", key, 9000, 10000);

  // A waiting locker (retries) gets it once it is released.
  const waiter = redislock.createLock(client, { timeout: 5000, retries: 40, delay: 50 });
  const waiting = waiter.acquire(key);
  setTimeout(() => l1.release(), 200);
  await waiting;
  await check("held", key, waiter._id);
  await rejects(l1.release(), LockReleaseError, "second release");

  // Expiry and takeover: the old holder can neither extend nor release.
  await waiter.release();
  await check("gone", key);
  const short = redislock.createLock(client, { timeout: 600, retries: 0, delay: 50 });
  await short.acquire(key);
  await check("held", key, short._id);
  await check("gone", key);
  await l2.acquire(key);
  await check("held", key, l2._id);
  await rejects(short.extend(5000), LockExtendError, "extend of an expired lock");
  // extend failing marks it unlocked; force a release attempt of the stale
  // token the way a holder that missed the expiry would.
  short._locked = true;
  short._key = key;
  await rejects(short.release(), LockReleaseError, "release of an expired lock");
  await check("held", key, l2._id);
  await l2.release();
  await check("gone", key);
  expect(redislock.getAcquiredLocks().length === 0, "locks left in getAcquiredLocks()");
  await check("keys", prefix);
  await client.quit();
  console.log("ioredis-lock: all assertions passed");
});
