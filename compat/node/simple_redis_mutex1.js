// simple-redis-mutex 1.4.0 with one ioredis client. Run by
// compat/libs_test.go:
//
//   node simple_redis_mutex1.js PORT PREFIX
//
// Unlike 3.x it locks and releases with scripts, each given two KEYS (the
// lock, its FIFO counter) and the same ARGV list: the acquire gets
// {value, timeout, FIFO id}, empty without FIFO, and reads only the first
// two, so lockproxy must run it with an ARGV it does not read. It has no
// extend; lock() polls every retryTimeMillis.
"use strict";

const Redis = require("ioredis");
const { lock } = require("simple-redis-mutex-1");
const { releaseScript } = require("simple-redis-mutex-1/src/lua");
const { check, expect, main, sleep } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const c1 = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const c2 = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const name = prefix + "lock";
  const key = "@simple-redis-mutex:lock-" + name;
  const counter = key + ":last-out-id";

  // Acquire: the key holds the lock's value with its TTL.
  const release = await lock(c1, name, { timeoutMillis: 10000, failAfterMillis: 3000 });
  const value = await c1.get(key);
  expect(value, "GET of the held lock answered nothing");
  await check("held", key, value);
  await check("pttl", key, 9000, 10000);

  // Refused while held: lock() gives up after failAfterMillis.
  let refused = null;
  await lock(c2, name, { timeoutMillis: 10000, retryTimeMillis: 50, failAfterMillis: 300 }).then(
    () => (refused = false),
    () => (refused = true),
  );
  expect(refused, "lock() of a held lock succeeded");
  await check("held", key, value);

  // A stranger's release (the library's script with another value) does
  // nothing.
  const r = await c2.eval(releaseScript, 2, key, counter, "stranger");
  expect(r === 0, `a stranger's release answered ${r}, want 0`);
  await check("held", key, value);

  // A waiter in lock() gets it once the holder releases it.
  let woken = null;
  const waiting = lock(c2, name, { timeoutMillis: 10000, retryTimeMillis: 50, failAfterMillis: 5000 }).then((rel) => (woken = rel));
  await sleep(200);
  expect(woken === null, "the waiter got a held lock");
  await release();
  const waiterRelease = await waiting;
  const value2 = await c2.get(key);
  expect(value2 && value2 !== value, `after the release the key holds ${value2}, want the waiter's value`);
  await check("held", key, value2);

  // The first holder's release again leaves the waiter's lock alone.
  await release();
  await check("held", key, value2);
  await waiterRelease();
  await check("gone", key);

  // Expiry: another client gets it after the TTL, and the expired
  // holder's release leaves the new lock alone.
  const release3 = await lock(c1, name, { timeoutMillis: 500, failAfterMillis: 3000 });
  await sleep(700);
  const release4 = await lock(c2, name, { timeoutMillis: 10000, retryTimeMillis: 50, failAfterMillis: 3000 });
  const value4 = await c2.get(key);
  await check("granted", key, value4);
  await release3();
  await check("granted", key, value4);
  await release4();
  await check("gone", key);
  await c1.quit();
  await c2.quit();
});
