// redis-mutex 2.0.1 with node_redis 3 clients (it calls send_command).
// Run by compat/libs_test.go:
//
//   node redis_mutex.js PORT PREFIX
//
// runWithMutex acquires with SET key mutex PX ms NX, renews with
// SET key mutex PX ms XX every intervalTime - renewTime while the job runs,
// and releases with DEL. When a renewal fails it exits its process
// (process.exit(1)): a job several renewals long passes only if every
// renewal succeeded.
"use strict";

const redis = require("redis3");
const { runWithMutex } = require("redis-mutex");
const { check, expect, main, sleep } = require("./driver");

main(async () => {
  const [port, prefix] = [Number(process.argv[2]), process.argv[3]];
  const connect = () => {
    const c = redis.createClient({ port, host: "127.0.0.1" });
    c.on("error", () => {});
    return c;
  };
  const [c1, c2] = [connect(), connect()];
  const key = prefix + "mutex";
  const opts = (client) => ({ intervalTime: 600, renewTime: 300, maxTime: 20000, attempts: 1, key, redisClient: client });

  const result = await runWithMutex(opts(c1), async () => {
    await check("held", key, "mutex");
    await check("pttl", key, 1, 600);

    // Another runner is refused while the job holds the mutex.
    const other = await runWithMutex(opts(c2), async () => "ran").then(
      (v) => v,
      (e) => e.message,
    );
    expect(other === "Other instance is running!", `a second runner while held: ${other}`);

    // Renewed every 300 ms: five renewals, each one must succeed (the
    // library exits otherwise), and the TTL is back up at the end.
    await sleep(1600);
    await check("held", key, "mutex");
    await check("pttl", key, 1, 600);
    return "done";
  });
  expect(result === "done", `runWithMutex resolved ${result}`);

  // Released by DEL, which the library does not wait for.
  await sleep(200);
  await check("gone", key);
  const again = await runWithMutex(opts(c2), async () => "again");
  expect(again === "again", `re-acquire after the release: ${again}`);
  await sleep(200);
  await check("gone", key);
  c1.quit();
  c2.quit();
});
