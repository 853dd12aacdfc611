// @sesamecare-oss/redlock 1.4.0 with one ioredis client: lockproxy is the
// quorum. Run by compat/libs_test.go:
//
//   node sesame_redlock.js PORT PREFIX
//
// Its scripts start with redis.pcall("SELECT", tonumber(ARGV[1])), so the
// lock value is ARGV[2] and the TTL ARGV[3].
"use strict";

const Redis = require("ioredis");
const { Redlock, ExecutionError, ResourceLockedError, Lock } = require("@sesamecare-oss/redlock");
const { check, expect, main, rejects, sleep } = require("./driver");

// refusedAsLocked: err is an ExecutionError whose every vote against says
// the resource is locked by another value (ResourceLockedError), not that
// Redis failed.
async function refusedAsLocked(err, what) {
  expect(err.attempts.length > 0, `${what}: no attempt recorded`);
  for (const attempt of err.attempts) {
    const stats = await attempt;
    expect(stats.votesAgainst.size > 0, `${what}: an attempt has no vote against`);
    for (const e of stats.votesAgainst.values()) {
      expect(e instanceof ResourceLockedError, `${what}: voted against with ${e && e.name}: ${e && e.message}`);
    }
  }
}

// explain adds to an unexpected ExecutionError why its votes went against.
async function explain(err) {
  if (!(err instanceof ExecutionError)) throw err;
  const why = [];
  for (const attempt of err.attempts) {
    for (const e of (await attempt).votesAgainst.values()) why.push(`${e.name}: ${e.message}`);
  }
  throw new Error(`${err.message} Votes against: ${why.join("; ")}\n${err.stack}`);
}

main(() => lifecycle().catch(explain));

async function lifecycle() {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const client = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1 });
  const redlock = new Redlock([client], { retryCount: 0 });
  const patient = new Redlock([client], { retryCount: 60, retryDelay: 50, retryJitter: 10 });
  const [a, b] = ["a", "b"].map((k) => prefix + k);

  // Acquire.
  let lock = await redlock.acquire([a], 10000);
  await check("held", a, lock.value);
  await check("pttl", a, 9000, 10000);

  // Refused while held, because it is held.
  let err = await rejects(redlock.acquire([a], 10000), ExecutionError, "acquire of a held resource");
  await refusedAsLocked(err, "acquire of a held resource");
  await check("held", a, lock.value);

  // Extend moves the TTL back up.
  await check("shorten", a, 3000);
  lock = await lock.extend(10000);
  expect(lock.expiration > Date.now() + 9000, "extended lock expires too soon");
  await check("held", a, lock.value);
  await check("pttl", a, 9000, 10000);

  // A stranger's value can neither extend nor release it.
  await check("shorten", a, 3000);
  const stranger = new Lock(redlock, [a], "stranger", [], Date.now() + 10000);
  err = await rejects(stranger.extend(10000), ExecutionError, "extend with a stranger's value");
  await refusedAsLocked(err, "extend with a stranger's value");
  err = await rejects(stranger.release(), ExecutionError, "release with a stranger's value");
  await refusedAsLocked(err, "release with a stranger's value");
  await check("held", a, lock.value);
  await check("pttl", a, 1, 3000);

  // Release; the released lock cannot be extended; another locker gets it.
  await lock.release();
  await check("gone", a);
  await rejects(lock.extend(10000), ExecutionError, "extend of a released lock");
  await check("gone", a);
  lock = await redlock.acquire([a], 10000);
  await check("held", a, lock.value);
  await lock.release();
  await check("gone", a);

  // Multi-resource: all keys or none; a refused [b, a] leaves no b behind.
  lock = await redlock.acquire([a], 10000);
  err = await rejects(redlock.acquire([b, a], 10000), ExecutionError, "acquire of [b, a] with a held");
  await refusedAsLocked(err, "acquire of [b, a] with a held");
  await check("gone", b);
  await lock.release();
  const multi = await redlock.acquire([a, b], 10000);
  for (const k of [a, b]) await check("held", k, multi.value);
  await multi.release();
  for (const k of [a, b]) await check("gone", k);

  // Expiry: a lock nobody extends expires after its TTL; a retrying locker
  // gets it then, and the expired holder's release leaves it alone.
  const short = await redlock.acquire([a], 800);
  await check("held", a, short.value);
  const start = Date.now();
  const next = await patient.acquire([a], 10000);
  expect(Date.now() - start >= 400, `a lock held for 800ms was taken after ${Date.now() - start}ms`);
  // "granted", not "held": the expired lock's keys vanish from the masters
  // at slightly different moments (each was written at its own), so a
  // retry in between is granted by a quorum and refused where the old key
  // was still there; the lock then lives on a quorum only, as Redlock's.
  await check("granted", a, next.value);
  await rejects(short.release(), ExecutionError, "release of an expired, retaken lock");
  await check("granted", a, next.value);
  await next.release();
  await check("gone", a);

  // using(): automatic extension keeps a 1s lock for 1.6s.
  await redlock.using([b], 1000, { automaticExtensionThreshold: 500 }, async (signal) => {
    await sleep(1600);
    expect(!signal.aborted, `using() lock lost: ${signal.error}`);
    await check("pttl", b, 1, 1000);
  });
  await check("gone", b);

  await check("keys", prefix);
  await client.quit();
  console.log("@sesamecare-oss/redlock: all assertions passed");
}
