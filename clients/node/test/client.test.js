"use strict";
const test = require("node:test");
const assert = require("node:assert");
const http = require("node:http");
const { pkg, freePort, silentPort, startSluice } = require("./helpers.js");

const uniq = (p) => `${p}:${Math.random().toString(16).slice(2, 10)}`;

test("typed decisions from the server; error replies throw", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ port: s.resp, timeout: 1000 });
  t.after(() => c.close());
  const k = uniq("user");
  let d = await c.acquire(k, { rate: 10, per: "second", burst: 10 });
  assert.deepStrictEqual([d.allowed, d.remaining, d.limit, d.retryAfter, d.limitedBy, d.source], [true, 9, 10, 0, k, "server"]);
  d = await c.acquire(k, { rate: 10, burst: 10, cost: 9 });
  d = await c.acquire(k, { rate: 10, burst: 10 });
  assert.ok(!d.allowed && d.retryAfter > 0 && d.source === "server");
  assert.strictEqual((await c.acquire(k, { rate: 10, burst: 10 })).source, "cache");
  assert.ok((await c.refund(k, 5, { rate: 10, burst: 10 })).remaining >= 5);
  assert.ok((await c.acquire(k, { rate: 10, burst: 10 })).allowed);
  s.cli("RL.BUDGET", "SET", "nodet/api", "RATE", 100, "PER", "minute", "SCOPE", "user");
  d = await c.acquireBudget("nodet/api", { key: "alice", cost: 5 });
  assert.deepStrictEqual([d.allowed, d.remaining, d.limitedBy], [true, 95, "nodet/api#alice"]);
  assert.strictEqual((await c.peekBudget("nodet/api", { key: "alice", cost: 0 })).remaining, 95);
  d = await c.throttle(uniq("thr"), 1, 1, 60);
  assert.deepStrictEqual([d.allowed, d.limit, d.remaining], [true, 2, 1]);
  await assert.rejects(c.acquireBudget("nosuch/path"), (e) => e instanceof pkg.SluiceError && e.code === "NOBUDGET");
  await assert.rejects(c.acquire("k", { rate: 0 }), (e) => e.code === "ERR");
  assert.strictEqual(c.breaker.state, "closed");
});

for (const where of ["stopped", "silent"]) {
  for (const [failure, source] of [["open", "fail_open"], ["closed", "fail_closed"]]) {
    test(`sluice ${where}, failure ${failure}: within the deadline, then the breaker`, async (t) => {
      let port;
      if (where === "stopped") port = await freePort();
      else { const sp = await silentPort(); port = sp.port; t.after(sp.close); }
      const c = new pkg.Client({ port, failure }); // the default deadline, 50 ms
      t.after(() => c.close());
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const d = await c.acquire("user:1", { rate: 10 });
        const took = performance.now() - t0;
        assert.strictEqual(d.source, source);
        assert.ok(d.error, "the decision says why");
        assert.ok(took < 100, `call ${i} took ${took.toFixed(1)} ms`);
      }
      assert.strictEqual(c.breaker.state, "open");
      // The cost is the best of thirty runs, in CPU time or in wall time:
      // on a loaded machine wall time also counts other processes' turns,
      // and CPU time the process's other threads (the collector's). Warmed
      // up first: the cost of a call, not of compiling this loop.
      for (let i = 0; i < 50000; i++) await c.acquire("user:1", { rate: 10 });
      let best = Infinity, bestWall = Infinity;
      for (let r = 0; r < 30; r++) {
        const c0 = process.cpuUsage(), t0 = performance.now();
        for (let i = 0; i < 1000; i++) await c.acquire("user:1", { rate: 10 });
        const used = process.cpuUsage(c0);
        bestWall = Math.min(bestWall, performance.now() - t0);
        best = Math.min(best, (used.user + used.system) / 1000);
      }
      t.diagnostic(`1000 calls with the breaker open: ${best.toFixed(3)} ms CPU, ${bestWall.toFixed(3)} ms wall`);
      assert.ok(Math.min(best, bestWall) < 1, `1000 calls with the breaker open took ${best.toFixed(3)} ms of CPU, ${bestWall.toFixed(3)} ms of wall time at best`);
    });
  }
}

test("fallback limit, half-open probe", async (t) => {
  let now = 0;
  const c = new pkg.Client({ port: await freePort(), failure: { rate: 2, per: 1000 }, clock: () => now });
  t.after(() => c.close());
  const got = [];
  for (let i = 0; i < 3; i++) got.push(await c.acquire("k", { rate: 100 }));
  assert.deepStrictEqual(got.map((d) => d.allowed), [true, true, false]);
  assert.ok(got.every((d) => d.source === "fallback"));
  assert.strictEqual(got[2].retryAfter, 500);
  now = 1000;
  assert.strictEqual(c.breaker.state, "half_open");
});

test("a refused key is not asked again before its retryAfter", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ port: s.resp, timeout: 1000 });
  t.after(() => c.close());
  const k = uniq("deny");
  const lim = { rate: 1, per: "2s", burst: 1 };
  assert.ok((await c.acquire(k, lim)).allowed);
  const denied = await c.acquire(k, lim);
  const at = performance.now();
  assert.ok(!denied.allowed && denied.retryAfter > 1000);
  const before = s.commands();
  let n = 0;
  while (performance.now() < at + denied.retryAfter - 200) {
    const d = await c.acquire(k, lim);
    assert.strictEqual(d.source, "cache");
    n++;
    await new Promise((ok) => setTimeout(ok, 10));
  }
  assert.strictEqual(s.commands() - before, 1, "the refused key was asked again"); // the INFO that counts
  assert.ok(n > 10);
  await new Promise((ok) => setTimeout(ok, Math.max(0, at + denied.retryAfter + 50 - performance.now())));
  assert.strictEqual((await c.acquire(k, lim)).source, "server");
});

test("middleware: headers, 429, 503", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ port: s.resp, timeout: 1000 });
  const dead = new pkg.Client({ port: await freePort(), failure: "closed" });
  t.after(() => { c.close(); dead.close(); });
  const id = uniq("mw");
  const mw = pkg.express({ client: c, limit: { rate: 2, per: "minute" }, key: () => id });
  const closed = pkg.express({ client: dead, path: "demo/api" });
  const srv = http.createServer((req, res) => {
    const m = req.url === "/closed" ? closed : mw;
    m(req, res, () => res.end("hello"));
  });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  t.after(() => srv.close());
  const base = `http://127.0.0.1:${srv.address().port}`;
  let r = await fetch(base + "/");
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.headers.get("ratelimit-policy"), '"burst";q=2;w=60');
  assert.strictEqual(r.headers.get("ratelimit"), '"burst";r=1;t=30');
  await fetch(base + "/");
  r = await fetch(base + "/");
  assert.strictEqual(r.status, 429);
  assert.strictEqual(r.headers.get("retry-after"), "30");
  assert.match(await r.text(), /"status":429/);
  r = await fetch(base + "/closed");
  assert.strictEqual(r.status, 503);
});

test("error replies are told from failures, as ioredis and node-redis throw them", () => {
  class ReplyError extends Error { constructor(m) { super(m); this.name = "ReplyError"; } } // ioredis
  class ErrorReply extends Error {} // node-redis: the name stays "Error"
  class SimpleError extends ErrorReply {}
  for (const E of [ReplyError, SimpleError]) {
    assert.strictEqual(pkg.isTransient(new E("NOBUDGET no budget node on path 'x'")), false, E.name);
    assert.strictEqual(pkg.isTransient(new E("NORESERVATION no open reservation 'x'")), false, E.name);
    assert.strictEqual(pkg.isTransient(new E("TRYAGAIN no leader")), true, E.name);
  }
  assert.strictEqual(pkg.isTransient(new Error("connect ECONNREFUSED 127.0.0.1:1")), true);
});

test("a key or path named WAIT is not taken for the WAIT argument", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ port: s.resp, timeout: 2000, failure: "closed" });
  t.after(() => c.close());
  s.cli("RL.BUDGET", "SET", "nodewait", "RATE", 10, "PER", "minute", "SCOPE", "user");
  const d = await c.acquireBudget("nodewait", { key: "WAIT" });
  assert.deepStrictEqual([d.allowed, d.source, d.limitedBy], [true, "server", "nodewait#WAIT"]);
  const r = await c.reserve("WAIT", { rate: 10, estimate: 1 });
  assert.deepStrictEqual([r.allowed, r.source], [true, "server"]);
});
