// node-mutex 0.2.2 (its own node_redis 2.8 clients, one to publish and
// one to subscribe). Run by compat/libs_test.go:
//
//   node node_mutex.js PORT PREFIX
//
// It loads its two scripts with SCRIPT LOAD inside MULTI/EXEC, acquires
// with EVALSHA of a SETNX + PEXPIRE script (polling every sleepTime),
// and releases with a compare-and-delete script that returns nothing,
// then PUBLISHes the key on "<prefix>release". It has no extend.
"use strict";

const Redis = require("ioredis");
const makeMutex = require("node-mutex");
const { check, expect, main, sleep } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const reader = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const mutex = makeMutex({ host: "127.0.0.1", port, prefix: prefix + "mutex:", sleepTime: 50 });
  const key = prefix + "mutex:lock";
  // unlock() does not wait for its release: read until it is seen.
  const until = async (cond, what) => {
    for (let i = 0; i < 100; i++) {
      if (cond(await reader.get(key))) return;
      await sleep(20);
    }
    expect(false, `${what}: the key still holds ${await reader.get(key)}`);
  };

  // Acquire: the key holds the lock's id with its TTL.
  const unlock = await mutex.lock("lock", 10000);
  const value = await reader.get(key);
  expect(value, "GET of the held lock answered nothing");
  await check("held", key, value);
  await check("pttl", key, 9000, 10000);

  // A waiter polls while it is held.
  let got = null;
  const waiting = mutex.lock("lock", 10000).then((u) => (got = u));
  await sleep(300);
  expect(got === null, "the waiter got a held lock");
  await check("held", key, value);

  // A stranger's release (the library's script with another id) does
  // nothing.
  const release = "local id = redis.call('GET', KEYS[1]);if id == ARGV[1] then redis.call('DEL', KEYS[1]) end";
  const r = await reader.eval(release, 1, key, "stranger");
  expect(r === null, `a stranger's release answered ${r}, want nil`);
  await check("held", key, value);

  // Release: the waiter gets it.
  unlock();
  const unlock2 = await waiting;
  await until((v) => v && v !== value, "after the release");
  const value2 = await reader.get(key);
  await check("held", key, value2);
  // The first holder's unlock again is a no-op (node-mutex guards it).
  unlock();
  unlock2();
  await until((v) => v === null, "after the waiter's release");
  await check("gone", key);

  // Expiry: a lock held for 500 ms is taken by the next locker after it.
  const unlock3 = await mutex.lock("lock", 500);
  const start = Date.now();
  const unlock4 = await mutex.lock("lock", 10000);
  expect(Date.now() - start >= 300, `a lock held for 500 ms was taken after ${Date.now() - start} ms`);
  const value4 = await reader.get(key);
  await check("granted", key, value4);
  unlock4();
  await until((v) => v === null, "after the last release");
  await check("gone", key);
  void unlock3;
  await reader.quit();
});
