// simple-redis-mutex 3.0.0 with one node-redis 5 client. Run by
// compat/libs_test.go:
//
//   node simple_redis_mutex.js PORT PREFIX
//
// It acquires with SET NX PX (and INCR of a fencing counter), refreshes
// with GET + PEXPIRE, and releases with a script it sends by SCRIPT LOAD
// then EVALSHA, which deletes the key if it holds the caller's value and
// publishes on a channel, and returns nothing either way; waiters in lock()
// are woken by that message.
"use strict";

const { createClient } = require("redis");
const { lock, tryLock } = require("simple-redis-mutex");
const { check, expect, main, sleep } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const connect = async () => {
    const c = createClient({ socket: { port, host: "127.0.0.1", reconnectStrategy: false } });
    c.on("error", () => {});
    await c.connect();
    return c;
  };
  const [c1, c2] = [await connect(), await connect()];
  const name = prefix + "lock";
  const key = "@simple-redis-mutex:lock-" + name;

  // Acquire: the key holds the lock's value with its TTL.
  const [got, release] = await tryLock(c1, name, { timeout: 10000 });
  expect(got, "tryLock of a free lock returned false");
  expect(release.fencingToken > 0, `fencing token ${release.fencingToken}, want > 0`);
  const value = await c1.get(key);
  expect(value, "GET of the held lock answered nothing");
  await check("held", key, value);
  await check("pttl", key, 9000, 10000);

  // Refused while held.
  const [got2] = await tryLock(c2, name, { timeout: 10000 });
  expect(!got2, "tryLock of a held lock returned true");
  await check("held", key, value);

  // Refresh: the TTL goes back up.
  await check("shorten", key, 3000);
  await release.refreshTimeout();
  await check("held", key, value);
  await check("pttl", key, 9000, 10000);

  // A waiter in lock() (polling once a minute: only the release message
  // can wake it in time) gets the lock when the holder releases it.
  let woken = null;
  const waiting = lock(c2, name, { timeout: 10000, pollingInterval: 60000, failAfter: 8000 }).then((r) => (woken = r));
  await sleep(200);
  expect(woken === null, "the waiter got a held lock");
  await release();
  const waiterRelease = await waiting;
  const value2 = await c2.get(key);
  expect(value2 && value2 !== value, `after the release the key holds ${value2}, want the waiter's value`);
  await check("held", key, value2);

  // The first holder's release again does nothing (the library's own
  // guard), and the waiter's release frees the lock.
  await release();
  await check("held", key, value2);
  await waiterRelease();
  await check("gone", key);

  // Re-acquire, then expiry: another client gets it after the TTL.
  const [got3, release3] = await tryLock(c1, name, { timeout: 500 });
  expect(got3, "re-acquire of a free lock returned false");
  await sleep(700);
  const [got4, release4] = await tryLock(c2, name, { timeout: 10000 });
  expect(got4, "tryLock after the TTL returned false");
  const value4 = await c2.get(key);
  await release3(); // the expired holder's release leaves the new one alone
  await check("held", key, value4);
  await release4();
  await check("gone", key);
  await c1.quit();
  await c2.quit();
});
