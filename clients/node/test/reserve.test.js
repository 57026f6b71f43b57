"use strict";
// Reservations against the real binary: reserve, settle (below and above the
// estimate), release, renew, NORESERVATION, concurrency, withReservation, and
// the failure policy with sluice stopped or silent.
const test = require("node:test");
const assert = require("node:assert");
const { pkg, freePort, silentPort, startSluice } = require("./helpers.js");

const uniq = (p) => `${p}:${Math.random().toString(16).slice(2, 10)}`;
// 1000 tokens a day: a token refills every 86.4 s, so the levels are exact however slow the machine.
const DAY = { rate: 1000, per: "day" };

async function setup(t, opts = {}) {
  const s = await startSluice(t);
  if (!s) return [];
  const c = new pkg.Client({ port: s.resp, timeout: 2000, ...opts });
  t.after(() => c.close());
  const left = async (k) => (await c.peek(k, { ...DAY, cost: 0 })).remaining;
  return [s, c, left];
}

test("settle below and above the estimate, release, renew, NORESERVATION", async (t) => {
  const [, c, left] = await setup(t);
  if (!c) return;
  const k = uniq("llm");
  let r = await c.reserve(k, { ...DAY, estimate: 500, ttl: 120000 });
  assert.deepStrictEqual([r.allowed, r.remaining, r.limit, r.retryAfter, r.limitedBy, r.source], [true, 500, 1000, 0, k, "server"]);
  assert.ok(typeof r.id === "string" && r.id.length > 0);
  let d = await c.settle(r, 320); // 180 fewer than reserved: they go back
  assert.deepStrictEqual([d.allowed, d.remaining, d.limit, d.limitedBy], [true, 680, 1000, k]);
  assert.strictEqual(await left(k), 680);
  await assert.rejects(c.settle(r.id, 320), (e) => e instanceof pkg.NoReservation && e instanceof pkg.SluiceError && e.code === "NORESERVATION");

  r = await c.reserve(k, { ...DAY, estimate: 100 });
  assert.strictEqual(r.remaining, 580);
  d = await c.settle(r.id, 900); // 800 more than reserved: charged, never refused
  assert.ok(d.allowed && d.remaining === 0);
  assert.strictEqual(await left(k), 0);
  d = await c.acquire(k, DAY); // the debt, 220 tokens, then this one
  assert.ok(!d.allowed && d.retryAfter > 220 * 86400);

  const k2 = uniq("llm");
  r = await c.reserve(k2, { ...DAY, estimate: 400 });
  assert.strictEqual(await left(k2), 600);
  assert.strictEqual(await c.release(r), true);
  assert.strictEqual(await left(k2), 1000);
  assert.strictEqual(await c.release(r), false);
  assert.strictEqual(await c.renew(r, 60000), false);

  // Renewing moves the expiry: the slot's next free moment follows it.
  const g = uniq("gpu");
  r = await c.reserve(g, { concurrency: 1, estimate: 1, ttl: 30000 });
  let refused = await c.reserve(g, { concurrency: 1, estimate: 1 });
  assert.ok(!refused.allowed && refused.retryAfter > 0 && refused.retryAfter <= 30000);
  assert.strictEqual(await c.renew(r, 3600000), true);
  refused = await c.reserve(g, { concurrency: 1, estimate: 1 });
  assert.ok(!refused.allowed && refused.retryAfter > 600000);
  assert.strictEqual(await c.release(r.id), true);
  assert.strictEqual(c.breaker.state, "closed");
});

test("CONCURRENCY 2 refuses a third in flight and admits after a release", async (t) => {
  const [, c] = await setup(t);
  if (!c) return;
  const g = uniq("gpu");
  const o = { concurrency: 2, estimate: 1, ttl: 60000 };
  const a = await c.reserve(g, o), b = await c.reserve(g, o);
  assert.ok(a.allowed && b.allowed && a.id !== b.id);
  let third = await c.reserve(g, o);
  assert.deepStrictEqual([third.allowed, third.remaining, third.limit, third.limitedBy, third.id], [false, 0, 2, `concurrency:${g}`, null]);
  assert.ok(third.retryAfter > 0 && third.retryAfter <= 60000);
  assert.strictEqual(await c.settle(third, 1), null); // nothing held, nothing sent
  assert.strictEqual(await c.release(third), false);
  assert.strictEqual(await c.release(a), true);
  third = await c.reserve(g, o); // not a cached refusal: the slot is free
  assert.ok(third.allowed && third.id);
  await c.settle(b, 1);
  await c.release(third);
});

test("WAIT for a slot beyond the deadline", async (t) => {
  const [, c] = await setup(t, { timeout: 1000 });
  if (!c) return;
  const g = uniq("gpu");
  const first = await c.reserve(g, { concurrency: 1, estimate: 1, ttl: 2500 }); // expires in 2.5 s
  assert.deepStrictEqual([first.allowed, first.source], [true, "server"]);
  const r = await c.reserve(g, { concurrency: 1, estimate: 1, wait: 30000 }); // waits past the 1 s deadline, which grows by the wait
  assert.deepStrictEqual([r.allowed, r.source], [true, "server"]);
  assert.ok(r.id);
  await c.release(r);
});

test("budget form, NOBUDGET, degrade", async (t) => {
  const [s, c] = await setup(t);
  if (!c) return;
  const p = uniq("nres").replace(":", "-");
  s.cli("RL.BUDGET", "SET", p, '{"scope":"user","sustained":{"rate":1000,"window":"day"},"concurrency":2}');
  const r = await c.reserve(p, { key: "alice", estimate: 100, ttl: 60000 });
  assert.deepStrictEqual([r.allowed, r.remaining, r.limit, r.limitedBy], [true, 900, 1000, `${p}#alice`]);
  assert.strictEqual((await c.settle(r, 40)).remaining, 960);
  assert.strictEqual((await c.peekBudget(p, { key: "alice", cost: 0 })).remaining, 960);
  await assert.rejects(c.reserve("nosuch/path", { estimate: 1 }), (e) => e.code === "NOBUDGET" && !(e instanceof pkg.NoReservation));

  // Let through over a degrade limit: admitted, nothing held, no id.
  const dg = uniq("ndeg").replace(":", "-");
  s.cli("RL.BUDGET", "SET", dg, "RATE", 1, "PER", "hour", "STRATEGY", "degrade");
  assert.ok((await c.reserve(dg, { estimate: 1 })).id);
  const deg = await c.reserve(dg, { estimate: 1 });
  assert.deepStrictEqual([deg.allowed, deg.degraded, deg.id], [true, true, null]);
  assert.strictEqual(await c.settle(deg, 1), null);
  assert.strictEqual(await c.release(deg), false);
});

test("withReservation settles, releases what it did not, and on throw", async (t) => {
  const [, c, left] = await setup(t);
  if (!c) return;
  const g = uniq("gpu");
  const o = { concurrency: 1, estimate: 1, ttl: 60000 };
  const out = await c.withReservation(g, o, async (r) => {
    assert.ok(r.allowed && r.id && r.limitedBy === `concurrency:${g}`);
    const inner = await c.withReservation(g, o, async (refused) => refused.allowed);
    assert.strictEqual(inner, false);
    assert.strictEqual(await r.renew(120000), true);
    return (await r.settle(1)).allowed;
  });
  assert.strictEqual(out, true);
  let held;
  await assert.rejects(c.withReservation(g, o, async (r) => { held = r; assert.ok(r.allowed); throw new Error("the work failed"); }),
    /the work failed/);
  await assert.rejects(c.settle(held, 1), pkg.NoReservation); // released on the throw
  const k = uniq("llm");
  await c.withReservation(k, { ...DAY, estimate: 300 }, async () => assert.strictEqual(await left(k), 700));
  assert.strictEqual(await left(k), 1000); // neither settled nor released: released
});

for (const where of ["stopped", "silent"]) {
  for (const [failure, source, allowed] of [["open", "fail_open", true], ["closed", "fail_closed", false], [{ rate: 10, per: 3600000 }, "fallback", true]]) {
    test(`reserve with sluice ${where}, failure ${source}: decided within the deadline`, async (t) => {
      let port;
      if (where === "stopped") port = await freePort();
      else { const sp = await silentPort(); port = sp.port; t.after(sp.close); }
      const c = new pkg.Client({ port, timeout: 200, failure, breakerFailures: 2 });
      t.after(() => c.close());
      let r;
      for (let i = 0; i < 3; i++) { // two failures, then the open breaker
        const t0 = performance.now();
        r = await c.reserve("llm:acme", { rate: 10, estimate: 1, ttl: 60000 });
        const took = performance.now() - t0;
        assert.deepStrictEqual([r.allowed, r.source, r.id], [allowed, source, null], `call ${i}`);
        assert.ok(r.error, "the reservation says why");
        assert.ok(took < 5000, `call ${i} took ${took.toFixed(0)} ms with a 200 ms deadline`);
      }
      assert.strictEqual(c.breaker.state, "open");
      // Decided locally: settling or releasing it sends nothing.
      assert.strictEqual(await c.settle(r, 5), null);
      assert.strictEqual(await c.release(r), false);
      assert.strictEqual(await c.renew(r, 60000), false);
      assert.strictEqual(await c.withReservation("llm:acme", { rate: 10, estimate: 1 }, async (h) => [h.source, await h.settle(1)].join()), `${source},`);
      // An id from earlier cannot be settled while sluice is away.
      await assert.rejects(c.settle("0123@elsewhere", 5), pkg.Unavailable);
    });
  }
}

test("the fallback limit counts estimates", async (t) => {
  const c = new pkg.Client({ port: await freePort(), failure: { rate: 10, per: 3600000 }, clock: () => 0 });
  t.after(() => c.close());
  const got = [];
  for (let i = 0; i < 3; i++) got.push(await c.reserve("llm:acme", { rate: 100, estimate: 4 }));
  assert.deepStrictEqual(got.map((r) => r.allowed), [true, true, false]);
  assert.deepStrictEqual([got[2].remaining, got[2].source], [2, "fallback"]);
});
