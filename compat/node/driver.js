// Checkpoints and assertions shared by the node scripts that the Go compat
// tests run (see runDriven in compat/driver_test.go): at each check() the
// Go test looks at the masters themselves and answers "ok" on stdin.
"use strict";

const readline = require("readline");

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

function fail(msg) {
  process.stderr.write(`FAIL: ${msg}\n`);
  process.exit(1);
}

function expect(cond, msg) {
  if (!cond) fail(msg);
}

async function check(...args) {
  process.stdout.write(`CHECK ${args.join(" ")}\n`);
  const { value, done } = await lines.next();
  if (done || value.trim() !== "ok") {
    fail(`checkpoint ${args.join(" ")}: test answered ${done ? "nothing" : JSON.stringify(value)}`);
  }
}

// rejects awaits p and fails unless it rejects with an error of class cls.
async function rejects(p, cls, what) {
  try {
    await p;
  } catch (e) {
    if (e instanceof cls) return e;
    fail(`${what} rejected with ${e && e.name}: ${e && e.message}, want ${cls.name}`);
  }
  fail(`${what} resolved, want ${cls.name}`);
}

// main runs fn and exits 0 when it resolves, 1 with the error otherwise.
function main(fn) {
  fn().then(
    () => process.exit(0),
    (e) => fail(e && e.stack ? e.stack : String(e)),
  );
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = { check, expect, fail, main, rejects, sleep };
