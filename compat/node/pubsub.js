// Pub/sub through lockproxy with node-redis 5 (RESP2, its default, and
// RESP3) and ioredis (RESP2). Run by compat/node_test.go:
//
//   node pubsub.js PORT_SUB PORT_PUB PREFIX CLIENT
//
// The subscriber connects to PORT_SUB, the publisher and the lock client
// to PORT_PUB: two lockproxies on the same masters, or one redis-server
// twice. CLIENT is node-redis5, node-redis5-resp3 or ioredis.
// Checks: every message arrives once, in order (identical payloads too),
// on channels, patterns and shard channels; PUBLISH answers the receivers;
// an unsubscribed channel gets nothing; keyspace notifications of a lock
// taken and released through the other proxy.
"use strict";

const { check, expect, main, sleep } = require("./driver");

// settle is how long a subscriber keeps listening after the last expected
// message, to catch copies the proxy failed to drop.
const settle = 300;

// client wraps one connection of the library under test behind the few
// calls the checks need; on(kind, fn) receives (kind, pattern, channel,
// message) for every message, pmessage and smessage.
async function client(lib, port, name) {
  if (lib === "ioredis") {
    const Redis = require("ioredis");
    const c = new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 1, connectionName: name });
    // Ready first, as node-redis's connect() below: ioredis writes a
    // SUBSCRIBE at once while its handshake (CLIENT SETNAME, SETINFO, then
    // the ready check's INFO) is still in flight, since SUBSCRIBE may run
    // while a server loads; once its reply is in, ioredis refuses its own
    // INFO ("Connection in subscriber mode, only subscriber commands may
    // be used") and fails the ready check. Redis 7.0 does the same: it is
    // the caller's race (seen once under load in CI).
    await new Promise((resolve, reject) => {
      c.once("error", reject);
      c.once("ready", () => {
        c.off("error", reject);
        resolve();
      });
    });
    const listeners = [];
    c.on("message", (ch, msg) => listeners.forEach((f) => f("message", null, ch, msg)));
    c.on("pmessage", (pat, ch, msg) => listeners.forEach((f) => f("pmessage", pat, ch, msg)));
    c.on("smessage", (ch, msg) => listeners.forEach((f) => f("smessage", null, ch, msg)));
    return {
      resp: 2,
      on: (f) => listeners.push(f),
      subscribe: (ch) => c.subscribe(ch),
      psubscribe: (p) => c.psubscribe(p),
      ssubscribe: (ch) => c.ssubscribe(ch),
      unsubscribe: (...ch) => c.unsubscribe(...ch), // none: all
      punsubscribe: (...p) => c.punsubscribe(...p),
      sunsubscribe: (ch) => c.sunsubscribe(ch),
      publish: (ch, m) => c.publish(ch, m),
      spublish: (ch, m) => c.spublish(ch, m),
      configSet: (k, v) => c.config("SET", k, v),
      setNX: (k, v, ms) => c.set(k, v, "PX", ms, "NX"),
      eval: (body, keys, args) => c.eval(body, keys.length, ...keys, ...args),
      hello: () => c.call("HELLO"),
      quit: () => c.quit(),
    };
  }
  expect(lib === "node-redis5" || lib === "node-redis5-resp3", `unknown client ${lib}`);
  const { createClient } = require("redis");
  const opts = { socket: { host: "127.0.0.1", port, reconnectStrategy: false }, name };
  if (lib === "node-redis5-resp3") opts.RESP = 3;
  const c = createClient(opts);
  c.on("error", (e) => process.stderr.write(`${lib} ${name}: ${e}\n`));
  await c.connect();
  const listeners = [];
  const fire = (kind, pat) => (msg, ch) => listeners.forEach((f) => f(kind, pat, ch, msg));
  return {
    resp: lib === "node-redis5" ? 2 : 3,
    on: (f) => listeners.push(f),
    subscribe: (ch) => c.subscribe(ch, fire("message", null)),
    psubscribe: (p) => c.pSubscribe(p, fire("pmessage", p)),
    ssubscribe: (ch) => c.sSubscribe(ch, fire("smessage", null)),
    unsubscribe: (ch) => c.unsubscribe(ch),
    punsubscribe: (p) => c.pUnsubscribe(p),
    sunsubscribe: (ch) => c.sUnsubscribe(ch),
    publish: (ch, m) => c.publish(ch, m),
    spublish: (ch, m) => c.sPublish(ch, m),
    configSet: (k, v) => c.configSet(k, v),
    setNX: (k, v, ms) => c.set(k, v, { NX: true, PX: ms }),
    eval: (body, keys, args) => c.eval(body, { keys, arguments: args }),
    hello: () => c.sendCommand(["HELLO"]),
    quit: () => c.quit(),
  };
}

// inbox records what a subscriber received, with the time.
function inbox(sub) {
  const got = [];
  sub.on((kind, pat, ch, msg) => got.push({ kind, pat, ch, msg: String(msg), at: Date.now() }));
  // want waits until the messages matching f are exactly list (by
  // "kind pattern channel message"), then for settle ms more.
  got.want = async (what, f, list) => {
    const fmt = (m) => [m.kind, m.pat || "-", m.ch, m.msg].join(" ");
    const deadline = Date.now() + 5000;
    const mine = () => got.filter(f).map(fmt);
    while (mine().length < list.length && Date.now() < deadline) await sleep(5);
    await sleep(settle);
    const have = mine();
    expect(JSON.stringify(have) === JSON.stringify(list), `${what}: received ${JSON.stringify(have)}, want ${JSON.stringify(list)}`);
  };
  return got;
}

main(async () => {
  const [subPort, pubPort, prefix, lib] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4], process.argv[5]];
  const sub = await client(lib, subPort, "compat-sub");
  const pub = await client(lib, pubPort, "compat-pub");
  const hello = await pub.hello();
  console.log(`${lib}: connected (RESP${sub.resp}); HELLO says ${JSON.stringify(hello).slice(0, 80)}`);
  const got = inbox(sub);
  const ch = prefix + "ch";
  const both = prefix + "pat:both"; // a channel that the pattern also matches
  const pat = prefix + "pat:*";
  const shard = prefix + "shard";

  await sub.subscribe(ch);
  await sub.subscribe(both);
  await sub.psubscribe(pat);
  await sub.ssubscribe(shard);

  // PUBLISH answers one receiver per matching subscription; each message
  // is delivered once, in order, identical payloads as often as sent.
  const t0 = Date.now();
  for (const m of ["m1", "m2", "same", "same"]) {
    const n = await pub.publish(ch, m);
    expect(n === 1, `PUBLISH ${ch} ${m} answered ${n}, want 1`);
  }
  await got.want("channel", (m) => m.ch === ch, ["m1", "m2", "same", "same"].map((m) => `message - ${ch} ${m}`));
  console.log(`${lib}: 4 messages through the channel, the last ${got.filter((m) => m.ch === ch).pop().at - t0} ms after the first PUBLISH was sent`);
  let n = await pub.publish(prefix + "pat:x", "p1");
  expect(n === 1, `PUBLISH to a pattern's channel answered ${n}, want 1`);
  n = await pub.publish(both, "b1");
  expect(n === 2, `PUBLISH to a channel subscribed and matched by a pattern answered ${n}, want 2`);
  // In publish order, and for one publish the channel's message before
  // the pattern's, as Redis sends them.
  await got.want("pattern", (m) => m.ch.startsWith(prefix + "pat:"), [
    `pmessage ${pat} ${prefix}pat:x p1`,
    `message - ${both} b1`,
    `pmessage ${pat} ${both} b1`,
  ]);
  n = await pub.spublish(shard, "s1");
  expect(n === 1, `SPUBLISH answered ${n}, want 1`);
  await got.want("shard channel", (m) => m.ch === shard, [`smessage - ${shard} s1`]);
  n = await pub.publish(prefix + "nobody", "x");
  expect(n === 0, `PUBLISH to a channel nobody hears answered ${n}, want 0`);

  // Unsubscribed: nothing more arrives, and PUBLISH answers 0 (once the
  // masters have dropped the subscription: lockproxy unsubscribes them
  // after answering the client, docs/pubsub.md).
  await sub.unsubscribe(ch);
  await sub.punsubscribe(pat);
  let tries = 0;
  for (; (n = await pub.publish(ch, "after")) !== 0 && tries < 100; tries++) await sleep(10);
  expect(n === 0, `PUBLISH to an unsubscribed channel still answers ${n} after 1s`);
  if (tries > 0) console.log(`${lib}: PUBLISH answered 0 after the UNSUBSCRIBE from try ${tries + 1}`);
  await pub.publish(prefix + "pat:x", "after");
  await got.want("after unsubscribing", (m) => m.msg === "after", []);

  // Keyspace notifications of a lock taken through the publisher's
  // server: turned on where the subscriber is (lockproxy: that proxy
  // synthesizes them) and where the lock is taken (that proxy emits its
  // decisions only when it has them on). Left on: the other runs of this
  // driver share the proxies and turn them on too.
  await sub.unsubscribe();
  await sub.sunsubscribe(shard);
  await sub.configSet("notify-keyspace-events", "KEA");
  await pub.configSet("notify-keyspace-events", "KEA");
  const key = prefix + "lock";
  const ks = "__keyspace@0__:" + key;
  await sub.psubscribe(ks);
  expect((await pub.setNX(key, "tok", 10000)) === "OK", "SET NX PX of a free key failed");
  await check("held", key, "tok");
  const release = 'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end';
  expect((await pub.eval(release, [key], ["tok"])) === 1, "release script did not answer 1");
  await check("gone", key);
  await got.want("keyspace", (m) => m.ch === ks, ["set", "expire", "del"].map((e) => `pmessage ${ks} ${ks} ${e}`));
  // Expiry: a short lock nobody releases.
  const t1 = Date.now();
  expect((await pub.setNX(key, "tok2", 300)) === "OK", "SET NX PX 300 of a free key failed");
  const deadline = Date.now() + 3000;
  while (!got.some((m) => m.ch === ks && m.msg === "expired") && Date.now() < deadline) await sleep(5);
  console.log(`${lib}: expired ${got.filter((m) => m.msg === "expired").map((m) => m.at - t1)} ms after a 300 ms lock was taken`);
  await got.want("keyspace after expiry", (m) => m.ch === ks, ["set", "expire", "del", "set", "expire", "expired"].map((e) => `pmessage ${ks} ${ks} ${e}`));
  await check("gone", key);
  await sub.punsubscribe();
  await Promise.all([sub.quit(), pub.quit()]);
  console.log(`${lib}: all assertions passed`);
});
