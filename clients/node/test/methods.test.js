"use strict";
// penalty, block and delete (rate-limiter-flexible's names) on sluice's commands.
const test = require("node:test");
const assert = require("node:assert");
const { pkg, freePort, startSluice } = require("./helpers.js");

const uniq = (p) => `${p}:${Math.random().toString(16).slice(2, 10)}`;
// 10 tokens an hour: one refills every 6 minutes, so the levels are exact however slow the machine.
const HOUR10 = { rate: 10, per: "hour" };

test("penalty charges beyond the limit, into debt; delete forgets the bucket", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ port: s.resp, timeout: 2000 });
  t.after(() => c.close());
  const k = uniq("p");
  assert.strictEqual((await c.acquire(k, HOUR10)).remaining, 9);
  let d = await c.penalty(k, 5, HOUR10);
  assert.deepStrictEqual([d.allowed, d.remaining, d.limit, d.limitedBy], [true, 4, 10, k]);
  d = await c.penalty(k, 20, HOUR10); // 16 beyond empty: never refused
  assert.deepStrictEqual([d.allowed, d.remaining], [true, 0]);
  d = await c.acquire(k, HOUR10); // 17 tokens to refill, 6 minutes each
  assert.ok(!d.allowed && d.retryAfter > 16 * 360000 && d.retryAfter <= 17 * 360000, `retryAfter ${d.retryAfter}`);
  d = await c.penalty(k, 1, HOUR10); // in debt: nothing more can be charged
  assert.deepStrictEqual([d.allowed, d.source], [false, "server"]);
  assert.strictEqual(d.id, undefined);
  assert.strictEqual(await c.delete(k), true);
  assert.strictEqual((await c.acquire(k, HOUR10)).remaining, 9, "delete left the bucket full");
  assert.strictEqual(await c.delete(uniq("none")), false);
  assert.strictEqual((await c.penalty(k, 0, HOUR10)).remaining, 9);

  s.cli("RL.BUDGET", "SET", "pen/api", "RATE", 100, "PER", "hour", "SCOPE", "user");
  assert.strictEqual((await c.acquireBudget("pen/api", { key: "bob" })).remaining, 99);
  d = await c.penaltyBudget("pen/api", 40, { key: "bob" });
  assert.deepStrictEqual([d.remaining, d.limitedBy], [59, "pen/api#bob"]);
  assert.strictEqual(await c.deleteBudget("pen/api", { key: "bob" }), true);
  assert.strictEqual((await c.peekBudget("pen/api", { key: "bob", cost: 0 })).remaining, 100);
  await assert.rejects(c.penaltyBudget("nosuch/path", 1), (e) => e.code === "NOBUDGET");
});

test("block refuses the key for at least the time asked, less than two tokens longer", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ port: s.resp, timeout: 2000 });
  t.after(() => c.close());
  const lim = { rate: 60, per: "hour" }; // a token a minute
  for (const start of [0, 30]) { // from full, and from half spent
    const k = uniq("b");
    if (start) await c.acquire(k, { ...lim, cost: start });
    const d = await c.block(k, 3600000, lim); // an hour
    assert.ok(d.allowed && d.remaining === 0, JSON.stringify(d));
    const r = await c.acquire(k, lim);
    assert.ok(!r.allowed, "blocked");
    // An hour from the block, less what passed since (well under a minute), plus at most a token (a minute).
    assert.ok(r.retryAfter > 3600000 - 60000 && r.retryAfter <= 3600000 + 60000, `from ${start}: retryAfter ${r.retryAfter}`);
  }
  const g = uniq("g");
  await c.block(g, 90000, { rate: 1, per: "minute", algo: "gcra" });
  const r = await c.acquire(g, { rate: 1, per: "minute", algo: "gcra" });
  assert.ok(!r.allowed && r.retryAfter > 90000 - 30000 && r.retryAfter <= 90000 + 120000, `gcra: retryAfter ${r.retryAfter}`);
});

test("bad arguments name the option and its range; sluice away: Unavailable", async (t) => {
  const c = new pkg.Client({ port: await freePort() });
  t.after(() => c.close());
  assert.throws(() => c.penalty("k", -1, HOUR10), /points must be an integer from 0 to 1000000000000, not -1/);
  assert.throws(() => c.penalty("k", 1.5, HOUR10), /points must be an integer/);
  assert.throws(() => c.block("k", 0, HOUR10), /ms must be at least 1/);
  assert.throws(() => c.block("k", 1000, {}), /rate is required/);
  assert.throws(() => c.block("k", 1000, { rate: 5, algo: "fixed_window" }), /token_bucket, gcra or leaky_bucket/);
  assert.throws(() => c.block("k", 1000, { rate: 5, per: "fortnight" }), /per must be a unit/);
  await assert.rejects(c.penalty("k", 1, HOUR10), pkg.Unavailable);
  await assert.rejects(c.delete("k"), pkg.Unavailable);
});
