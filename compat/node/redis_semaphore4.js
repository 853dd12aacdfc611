// redis-semaphore 4.1.0's Mutex with one ioredis client. Run by
// compat/libs_test.go:
//
//   node redis_semaphore4.js PORT PREFIX
//
// Its refresh differs from 5.x's: it extends the caller's lock and also
// takes the key again when it is free (expired or released), answering 1
// for both and 0 when another holds it: an acquire-or-extend.
"use strict";

const Redis = require("ioredis");
const { Mutex } = require("redis-semaphore-4");
const { refreshMutex } = require("redis-semaphore-4/lib/mutex/refresh");
const { releaseMutex } = require("redis-semaphore-4/lib/mutex/release");
const { check, expect, main, rejects, sleep } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const client = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const name = prefix + "lock";
  const key = "mutex:" + name;
  // No automatic refresh unless a step asks for it.
  const manual = { lockTimeout: 10000, refreshInterval: 0, acquireTimeout: 300, retryInterval: 50 };

  const a = new Mutex(client, name, manual);
  await a.acquire();
  await check("held", key, a.identifier);
  await check("pttl", key, 9000, 10000);

  // Refused while held.
  const b = new Mutex(client, name, manual);
  await rejects(b.acquire(), Error, "acquire of a held mutex");
  await check("held", key, a.identifier);

  // A stranger's refresh and release do nothing.
  await check("shorten", key, 3000);
  expect(!(await refreshMutex(client, key, "stranger", 10000)), "a stranger's refresh returned true");
  await releaseMutex(client, key, "stranger");
  await check("held", key, a.identifier);
  await check("pttl", key, 1, 3000);

  // The holder's refresh extends.
  expect(await refreshMutex(client, key, a.identifier, 10000), "the holder's refresh returned false");
  await check("held", key, a.identifier);
  await check("pttl", key, 9000, 10000);

  // Release; the holder's refresh of the free key takes it again.
  await a.release();
  await check("gone", key);
  expect(await refreshMutex(client, key, a.identifier, 10000), "a refresh of a free key returned false");
  await check("held", key, a.identifier);
  await check("pttl", key, 9000, 10000);
  await releaseMutex(client, key, a.identifier);
  await check("gone", key);

  // A waiter gets it after the holder's release; the automatic refresh
  // keeps a 2 s lock past its TTL meanwhile. (4.x lets an error of a
  // refresh, such as lockproxy's NOQUORUM when the masters are slower
  // than node_timeout, escape as an unhandled rejection that ends the
  // process: few refreshes and slow polling keep that rare under load.)
  const h = new Mutex(client, name, { lockTimeout: 2000, refreshInterval: 700, acquireTimeout: 300, retryInterval: 50 });
  await h.acquire();
  const w = new Mutex(client, name, { ...manual, acquireTimeout: 8000, retryInterval: 250 });
  let got = false;
  const waiting = w.acquire().then(() => (got = true));
  await sleep(3000);
  expect(!got, "the waiter got a held, refreshed mutex");
  await check("held", key, h.identifier);
  await h.release();
  await waiting;
  await check("held", key, w.identifier);
  await w.release();
  await check("gone", key);
  await client.quit();
});
