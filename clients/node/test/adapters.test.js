"use strict";
// The Express, Fastify and Koa adapters, each in the real framework against
// the real binary: the limit, headers (sluice's own, express-rate-limit's
// draft-6/7/8 and legacy ones), Retry-After on every refusal, skip,
// keyGenerator, handler and message, skipFailedRequests and
// skipSuccessfulRequests, and the failure policy (open, closed).
const test = require("node:test");
const assert = require("node:assert");
const crypto = require("node:crypto");
const { pkg, freePort, startSluice, framework, until } = require("./helpers.js");

const TERMINAL = { ok: "hello", fail: "boom" };
// What decided, for the failure messages: x-test-source and x-test-error.
const diag = (d, set) => {
  if (!d) return;
  set("x-test-source", d.source);
  if (d.error) set("x-test-error", String(d.error.message).replace(/[^\x20-\x7e]/g, "?").slice(0, 200));
};

const builders = {
  async express(t, routes) {
    const express = framework("express");
    const app = express();
    const teapot = (req, res, next, info) => res.status(418).json({ limit: info.limit, remaining: info.remaining, key: info.key });
    for (const [p, o] of Object.entries(routes)) {
      app.get(p, pkg.express(o.handler === "teapot" ? { ...o, handler: teapot } : o),
        (req, res) => { diag(req.sluice, (n, v) => res.set(n, v)); return req.get("x-fail") ? res.status(500).send(TERMINAL.fail) : res.send(TERMINAL.ok); });
    }
    const srv = await new Promise((ok) => { const s = app.listen(0, "127.0.0.1", () => ok(s)); });
    t.after(() => new Promise((ok) => { srv.closeAllConnections(); srv.close(ok); }));
    return `http://127.0.0.1:${srv.address().port}`;
  },
  async fastify(t, routes) {
    const Fastify = framework("fastify");
    const app = Fastify();
    const teapot = (request, reply, info) => reply.code(418).send({ limit: info.limit, remaining: info.remaining, key: info.key });
    for (const [p, o] of Object.entries(routes)) {
      app.register(async (inst) => {
        await inst.register(pkg.fastify, o.handler === "teapot" ? { ...o, handler: teapot } : o);
        inst.get("/", async (request, reply) => {
          diag(request.sluice, (n, v) => reply.header(n, v));
          return request.headers["x-fail"] ? reply.code(500).send(TERMINAL.fail) : TERMINAL.ok;
        });
      }, { prefix: p });
    }
    await app.listen({ port: 0, host: "127.0.0.1" });
    t.after(() => app.close());
    return `http://127.0.0.1:${app.server.address().port}`;
  },
  async koa(t, routes) {
    const Koa = framework("koa");
    const app = new Koa();
    const teapot = (ctx, next, info) => { ctx.status = 418; ctx.body = { limit: info.limit, remaining: info.remaining, key: info.key }; };
    const mws = Object.fromEntries(Object.entries(routes).map(([p, o]) => [p, pkg.koa(o.handler === "teapot" ? { ...o, handler: teapot } : o)]));
    app.use(async (ctx) => {
      await mws[ctx.path](ctx, async () => {
        diag(ctx.state.sluice, (n, v) => ctx.set(n, v));
        if (ctx.get("x-fail")) { ctx.status = 500; ctx.body = TERMINAL.fail; } else ctx.body = TERMINAL.ok;
      });
    });
    const srv = await new Promise((ok) => { const s = app.listen(0, "127.0.0.1", () => ok(s)); });
    t.after(() => new Promise((ok) => { srv.closeAllConnections(); srv.close(ok); }));
    return `http://127.0.0.1:${srv.address().port}`;
  },
};

const intIn = (v, lo, hi, what) => {
  assert.match(String(v), /^\d+$/, `${what}: ${v}`);
  assert.ok(Number(v) >= lo && Number(v) <= hi, `${what}: ${v} not in ${lo}..${hi}`);
  return Number(v);
};
const pk = (key) => Buffer.from(crypto.createHash("sha256").update(key).digest("hex").slice(0, 12)).toString("base64");

for (const name of Object.keys(builders)) {
  test(`${name}: limit, headers, Retry-After, skip, handler, counted outcomes, failure policy`, async (t) => {
    const s = await startSluice(t);
    if (!s) { framework(name); return; } // without the binary it skips, but a missing framework still fails
    const client = new pkg.Client({ port: s.resp, timeout: 2000 });
    const closed = new pkg.Client({ port: await freePort(), failure: "closed", breakerCooldown: 5000 });
    const open = new pkg.Client({ port: await freePort(), failure: "open" });
    t.after(() => { client.close(); closed.close(); open.close(); });
    // Connected before the requests: what is under test is the adapter, not a loaded machine's first connection.
    await until(async () => (await client.acquire("warm", { rate: 1000000 })).source === "server", 30000, "the client did not reach sluice");
    const run = Math.random().toString(16).slice(2, 10);
    // A key per route: inline keys are one namespace on the server, whatever their limits.
    const userKey = (route) => (...args) => {
      const req = name === "koa" ? args[0].request : args[0];
      const u = req.headers["x-user"];
      return u ? `${run}:${route}:${u}` : null; // no user: not limited
    };
    const skip = (...args) => (name === "koa" ? args[0].request : args[0]).headers["x-skip"] === "1";
    const base = await builders[name](t, {
      "/d7": { client, limit: 2, windowMs: 60000, standardHeaders: "draft-7", legacyHeaders: false, keyGenerator: userKey("d7"), skip },
      "/d6": { client, limit: () => 1, windowMs: 60000, standardHeaders: "draft-6", keyGenerator: userKey("d6"), message: "slow down" },
      "/d8": { client, max: 3, windowMs: 3600000, standardHeaders: "draft-8", legacyHeaders: false, keyGenerator: userKey("d8"), prefix: "p8:", handler: "teapot" },
      "/own": { client, limit: { rate: 2, per: "minute" }, key: userKey("own") },
      "/fail": { client, limit: 2, windowMs: 3600000, standardHeaders: true, legacyHeaders: false, keyGenerator: userKey("fail"), skipFailedRequests: true },
      "/succ": { client, limit: 2, windowMs: 3600000, standardHeaders: true, legacyHeaders: false, keyGenerator: userKey("succ"), skipSuccessfulRequests: true, statusCode: 503 },
      "/closed": { client: closed, path: "demo/api" },
      "/closed7": { client: closed, limit: 5, standardHeaders: "draft-7" },
      "/open": { client: open, limit: 5, standardHeaders: "draft-7" },
    });
    const get = async (p, h = {}) => {
      const r = await fetch(base + p, { headers: h });
      return { status: r.status, h: (n) => r.headers.get(n), body: await r.text(), headers: Object.fromEntries(r.headers) };
    };

    // draft-7, express-rate-limit's limit and windowMs; a fixed window of 60 s.
    let r = await get("/d7", { "x-user": "a" });
    assert.strictEqual(r.status, 200, JSON.stringify(r));
    assert.strictEqual(r.body, "hello");
    assert.strictEqual(r.h("ratelimit-policy"), "2;w=60", JSON.stringify(r.headers));
    assert.match(r.h("ratelimit"), /^limit=2, remaining=1, reset=\d+$/);
    intIn(/reset=(\d+)/.exec(r.h("ratelimit"))[1], 0, 60, "reset");
    assert.strictEqual(r.h("x-ratelimit-limit"), null, "legacyHeaders: false");
    assert.match((await get("/d7", { "x-user": "a" })).h("ratelimit"), /^limit=2, remaining=0, /);
    r = await get("/d7", { "x-user": "a" });
    assert.strictEqual(r.status, 429);
    intIn(r.h("retry-after"), 1, 60, "Retry-After");
    assert.match(r.h("content-type"), /^application\/problem\+json/);
    assert.strictEqual(JSON.parse(r.body).status, 429);
    assert.match(r.h("ratelimit"), /^limit=2, remaining=0, /);
    // skip, and a key of its own: neither is the refused one.
    r = await get("/d7", { "x-user": "a", "x-skip": "1" });
    assert.deepStrictEqual([r.status, r.h("ratelimit"), r.h("retry-after")], [200, null, null]);
    assert.strictEqual((await get("/d7", { "x-user": "b" })).status, 200);
    r = await get("/d7"); // keyGenerator gave null: not limited
    assert.deepStrictEqual([r.status, r.h("ratelimit")], [200, null]);

    // draft-6 and the legacy headers (legacyHeaders defaults to true), limit as a function, message.
    r = await get("/d6", { "x-user": "a" });
    assert.strictEqual(r.status, 200);
    assert.strictEqual(r.h("ratelimit-policy"), "1;w=60");
    assert.deepStrictEqual([r.h("ratelimit-limit"), r.h("ratelimit-remaining")], ["1", "0"]);
    intIn(r.h("ratelimit-reset"), 0, 60, "RateLimit-Reset");
    assert.deepStrictEqual([r.h("x-ratelimit-limit"), r.h("x-ratelimit-remaining")], ["1", "0"]);
    const now = Math.floor(Date.now() / 1000);
    intIn(r.h("x-ratelimit-reset"), now - 5, now + 65, "X-RateLimit-Reset (a Unix time)");
    assert.strictEqual(r.h("ratelimit"), null);
    r = await get("/d6", { "x-user": "a" });
    assert.deepStrictEqual([r.status, r.body], [429, "slow down"]);
    assert.match(r.h("content-type"), /^text\/plain/);
    intIn(r.h("retry-after"), 1, 60, "Retry-After");

    // draft-8: the identifier "<limit>-in-<window>" and the partition key of the key, as express-rate-limit writes them; handler.
    r = await get("/d8", { "x-user": "a" });
    assert.strictEqual(r.status, 200);
    assert.match(r.h("ratelimit"), /^"3-in-1hr"; r=2; t=\d+$/);
    assert.strictEqual(r.h("ratelimit-policy"), `"3-in-1hr"; q=3; w=3600; pk=:${pk(`p8:${run}:d8:a`)}:`);
    await get("/d8", { "x-user": "a" });
    await get("/d8", { "x-user": "a" });
    r = await get("/d8", { "x-user": "a" });
    assert.strictEqual(r.status, 418, "the handler answers refusals");
    assert.deepStrictEqual(JSON.parse(r.body), { limit: 3, remaining: 0, key: `p8:${run}:d8:a` });
    intIn(r.h("retry-after"), 1, 3600, "Retry-After before the handler");

    // sluice's own headers (SPEC §10) with an inline {rate, per}.
    r = await get("/own", { "x-user": "a" });
    assert.strictEqual(r.h("ratelimit-policy"), '"burst";q=2;w=60');
    assert.strictEqual(r.h("ratelimit"), '"burst";r=1;t=30');
    assert.strictEqual(r.h("x-ratelimit-limit"), "2");
    await get("/own", { "x-user": "a" });
    r = await get("/own", { "x-user": "a" });
    assert.deepStrictEqual([r.status, r.h("retry-after")], [429, "30"]);

    // skipFailedRequests: 5xx answers give their token back (once the answer is sent: polled).
    const left = (u) => client.peek(`${run}:${u}`, { rate: 2, per: "3600000ms", algo: "fixed_window", cost: 0 });
    for (let i = 0; i < 3; i++) assert.strictEqual((await get("/fail", { "x-user": "f", "x-fail": "1" })).status, 500);
    await until(async () => (await left("fail:f")).remaining === 2, 10000, "the failed requests' tokens did not come back");
    assert.strictEqual((await get("/fail", { "x-user": "f" })).status, 200);
    assert.strictEqual((await get("/fail", { "x-user": "f" })).status, 200);
    await until(async () => (await left("fail:f")).remaining === 0, 10000, "the successes were not counted");
    r = await get("/fail", { "x-user": "f" });
    assert.strictEqual(r.status, 429);
    intIn(r.h("retry-after"), 1, 3600, "Retry-After");
    assert.match(r.h("ratelimit-remaining"), /^0$/);

    // skipSuccessfulRequests: only failures count; statusCode for the refusal.
    for (let i = 0; i < 3; i++) assert.strictEqual((await get("/succ", { "x-user": "s" })).status, 200);
    await until(async () => (await left("succ:s")).remaining === 2, 10000, "the successes' tokens did not come back");
    for (let i = 0; i < 2; i++) assert.strictEqual((await get("/succ", { "x-user": "s", "x-fail": "1" })).status, 500);
    await until(async () => (await left("succ:s")).remaining === 0, 10000, "the failures were not counted");
    r = await get("/succ", { "x-user": "s" });
    assert.strictEqual(r.status, 503, "statusCode");
    intIn(r.h("retry-after"), 1, 3600, "Retry-After");

    // The failure policy: closed answers 503 with Retry-After (until the
    // breaker lets a call through); open lets the request through bare.
    for (const p of ["/closed", "/closed7"]) {
      r = await get(p, { "x-user": "a" });
      assert.strictEqual(r.status, 503, p);
      intIn(r.h("retry-after"), 1, 5, `${p} Retry-After`);
      assert.match(r.h("content-type"), /^application\/problem\+json/);
      assert.strictEqual(JSON.parse(r.body).status, 503);
      assert.strictEqual(r.h("ratelimit"), null);
    }
    r = await get("/open", { "x-user": "a" });
    assert.deepStrictEqual([r.status, r.body, r.h("ratelimit"), r.h("retry-after")], [200, "hello", null, null]);
  });
}

test("bad options name the option and what it accepts", () => {
  const client = new pkg.Client({ port: 1 });
  t_after(client);
  const bad = [
    [{ client, limit: 0 }, /limit must be an integer from 1 to 1000000000000/],
    [{ client, limit: 5, windowMs: 0 }, /windowMs must be whole milliseconds from 1 to/],
    [{ client, limit: 5, standardHeaders: "draft-9" }, /standardHeaders must be false, true \(draft-6\), "draft-6", "draft-7" or "draft-8"/],
    [{ client, limit: 5, statusCode: 200 }, /statusCode must be an integer from 400 to 599/],
    [{ client, limit: 5, skip: true }, /skip must be a function/],
    [{ client, limit: 5, skipFailedRequests: "yes" }, /skipFailedRequests must be true or false/],
    [{ client, limit: 5, headers: true, legacyHeaders: false }, /headers \(sluice's own set\) or standardHeaders\/legacyHeaders/],
    [{ client, limit: { rate: 5 }, windowMs: 1000 }, /windowMs goes with limit as a number/],
    [{ client, path: "p", limit: 5 }, /path \(budget tree\) or limit/],
    [{ client }, /give either path/],
    [{ limit: 5 }, /client must be a sluice Client/],
    [{ client, limit: 5, max: 5 }, /limit or max/],
    [{ client, limit: 5, cost: -1 }, /cost must be an integer from 0/],
  ];
  for (const [o, re] of bad) {
    for (const make of [pkg.express, pkg.koa]) assert.throws(() => make(o), re, JSON.stringify(Object.keys(o)));
    let got;
    pkg.fastify({ hasRequestDecorator: () => true }, o, (e) => { got = e; });
    assert.match(String(got && got.message), re);
  }
});
function t_after(c) { c.close(); }
