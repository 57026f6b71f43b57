"use strict";
const test = require("node:test");
const assert = require("node:assert");
const { pkg, startSluice } = require("./helpers.js");

const RATE = 10, SECONDS = 30;

test("paced by sluice's headers: never refused, at least 90 % of what the limit allows", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const f = pkg.cooperativeFetch({ maxWait: 5000 });
  const body = JSON.stringify({ key: "coop:" + Math.random().toString(16).slice(2), rate: RATE, burst: RATE });
  const url = `http://127.0.0.1:${s.http}/v1/acquire`;
  let ok = 0, refused = 0;
  const start = performance.now();
  while (performance.now() - start < SECONDS * 1000) {
    const r = await f(url, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    await r.arrayBuffer();
    if (r.status === 200) ok++; else { assert.strictEqual(r.status, 429); refused++; }
  }
  const allowed = RATE + RATE * (performance.now() - start) / 1000;
  t.diagnostic(`${ok} admitted of ${allowed.toFixed(0)} allowed, ${refused} refused`);
  assert.strictEqual(refused, 0);
  assert.ok(ok >= 0.9 * allowed, `${ok} of ${allowed.toFixed(0)}`);
});

test("fail fast, and Retry-After waited out", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const url = `http://127.0.0.1:${s.http}/v1/acquire`;
  const init = { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ key: "ff:" + Math.random().toString(16).slice(2), rate: 1, per: "minute", burst: 1 }) };
  const f = pkg.cooperativeFetch({ maxWait: 0 });
  assert.strictEqual((await f(url, init)).status, 200);
  await assert.rejects(f(url, init), (e) => e instanceof pkg.RateLimited && e.retryAfter > 55000 && e.retryAfter <= 60000);
  const plain = await fetch(url, init);
  assert.strictEqual(plain.status, 429);
  const p = new pkg.Pacer({ maxWait: 0 });
  p.update("h", 429, (n) => plain.headers.get(n));
  assert.throws(() => p.reserve("h"), (e) => e.retryAfter >= 60000 && e.retryAfter <= 67000);
});

test("pacing: remaining spread over the reset; the policy's pace", () => {
  const paced = (h, n) => {
    let now = 0;
    const p = new pkg.Pacer({ clock: () => now });
    const get = (k) => { for (const x in h) if (x.toLowerCase() === k.toLowerCase()) return h[x]; return null; };
    p.reserve("api");
    p.update("api", 200, get);
    const times = [];
    for (let i = 0; i < n; i++) {
      let w;
      while ((w = p.reserve("api", 1e9)) > 0) now += w;
      times.push(Math.round(now * 1000) / 1000);
    }
    return times;
  };
  assert.deepStrictEqual(paced({ RateLimit: '"hour";r=3;t=40' }, 4), [10000, 20000, 30000, 40000]);
  assert.deepStrictEqual(paced({ "RateLimit-Policy": '"burst";q=10;w=2', RateLimit: '"burst";r=2;t=2' }, 4), [0, 0, 200, 400]);
});
