// node-redlock 5.0.0-beta.2 with one ioredis client pointed at lockproxy,
// single and multi-resource locks. Run by compat/node_test.go:
//
//   node redlock5.js PORT PREFIX
"use strict";

const Redis = require("ioredis");
const { default: Redlock, ExecutionError, Lock } = require("redlock");
const { check, expect, main, rejects, sleep } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const client = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  // One client: redlock's own quorum is 1 of 1, lockproxy's does the work.
  const redlock = new Redlock([client], { retryCount: 0 });
  const patient = new Redlock([client], { retryCount: 20, retryDelay: 50, retryJitter: 10 });
  const [a, b, c] = ["a", "b", "c"].map((k) => prefix + k);

  // Single resource: acquire, refused while held, extend, release.
  let lock = await redlock.acquire([a], 5000);
  await check("held", a, lock.value);
  await check("pttl", a, 4000, 5000);
  await rejects(redlock.acquire([a], 5000), ExecutionError, "acquire of a held resource");
  await check("held", a, lock.value);
  lock = await lock.extend(10000);
  expect(lock.expiration > Date.now() + 9000, "extended lock expires too soon");
  await check("pttl", a, 9000, 10000);

  // A stranger's value can neither release nor extend it.
  const stranger = new Lock(redlock, [a], "stranger", [], Date.now() + 5000);
  await rejects(stranger.release(), ExecutionError, "release with a stranger's value");
  await rejects(stranger.extend(5000), ExecutionError, "extend with a stranger's value");
  await check("held", a, lock.value);

  await lock.release();
  await check("gone", a);
  // Released: extending it again fails, another locker gets it.
  await rejects(lock.extend(5000), ExecutionError, "extend of a released lock");
  lock = await redlock.acquire([a], 5000);
  await check("held", a, lock.value);

  // Multi-resource: all keys or none. [b, a] is refused because a is held,
  // and b must not be left behind on any master.
  await rejects(redlock.acquire([b, a], 5000), ExecutionError, "acquire of [b, a] with a held");
  await check("gone", b);
  await lock.release();
  let multi = await redlock.acquire([a, b, c], 5000);
  for (const k of [a, b, c]) await check("held", k, multi.value);
  await rejects(redlock.acquire([c], 5000), ExecutionError, "acquire of c held by a multi-lock");
  multi = await multi.extend(8000);
  for (const k of [a, b, c]) await check("pttl", k, 7000, 8000);
  await multi.release();
  for (const k of [a, b, c]) await check("gone", k);

  // Retries: a waiting locker gets the resource once it is released.
  const holder = await redlock.acquire([a], 5000);
  setTimeout(() => holder.release(), 200);
  const waited = await patient.acquire([a], 5000);
  await check("held", a, waited.value);
  await waited.release();

  // using(): automatic extension keeps a 1s lock for 1.6s.
  await redlock.using([b], 1000, { automaticExtensionThreshold: 500 }, async (signal) => {
    await sleep(1600);
    expect(!signal.aborted, `using() lock lost: ${signal.error}`);
    await check("pttl", b, 1, 1000);
  });
  await check("gone", b);
  await check("keys", prefix);
  await client.quit();
  console.log("redlock: all assertions passed");
});
