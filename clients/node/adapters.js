"use strict";
// Middleware for Express (and node:http), Fastify and Koa: one sluice call
// per request, with express-rate-limit's options (windowMs and limit,
// keyGenerator, skip, handler, message, statusCode, skipFailedRequests,
// skipSuccessfulRequests, requestWasSuccessful, standardHeaders draft-6/7/8,
// legacyHeaders, identifier, requestPropertyName) or sluice's own (path or
// limit {rate, per, burst, algo}, key, cost, window, headers).

const crypto = require("node:crypto");
const headers = require("./headers.js");

const DRAFTS = ["draft-6", "draft-7", "draft-8"];
const MAX_TOKENS = 1e12;
const MAX_WINDOW_MS = 3650 * 86400000;
const UNITS = { second: 1, seconds: 1, sec: 1, minute: 60, minutes: 60, min: 60, hour: 3600, hours: 3600, day: 86400, days: 86400, week: 604800, weeks: 604800 };
const DURATION = { ns: 1e-9, us: 1e-6, "\u00b5s": 1e-6, ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800 };

/** The window of an inline limit in seconds (its per), for RateLimit-Policy; window (s) given wins; null when unknown. */
function windowOf(limit, window) {
  if (window != null) return window;
  if (!limit) return null;
  const per = limit.per ?? 1000;
  if (typeof per === "number") return per / 1000;
  if (UNITS[String(per).toLowerCase()]) return UNITS[String(per).toLowerCase()];
  let s = 0, m;
  const re = /(\d+)(ns|us|\u00b5s|ms|s|m|h|d|w)/y;
  while (re.lastIndex < per.length && (m = re.exec(per))) s += Number(m[1]) * DURATION[m[2]];
  return m && re.lastIndex === per.length && s > 0 ? s : null;
}

const isFn = (f) => typeof f === "function";
function fnOpt(o, name) {
  if (o[name] != null && !isFn(o[name])) throw new TypeError(`${name} must be a function, not ${typeof o[name]}`);
  return o[name];
}
function boolOpt(o, name, dflt) {
  const v = o[name] ?? dflt;
  if (typeof v !== "boolean") throw new TypeError(`${name} must be true or false, not ${JSON.stringify(v)}`);
  return v;
}
function limitNumber(n, what) {
  if (!(Number.isInteger(n) && n >= 1 && n <= MAX_TOKENS)) throw new RangeError(`${what} must be an integer from 1 to ${MAX_TOKENS} (requests per windowMs), not ${n}`);
  return n;
}
function costNumber(n) {
  if (n == null) return undefined;
  if (!(Number.isInteger(n) && n >= 0 && n <= MAX_TOKENS)) throw new RangeError(`cost must be an integer from 0 to ${MAX_TOKENS}, not ${n}`);
  return n;
}

/** express-rate-limit's identifier for draft-8: "<limit>-in-<duration>". */
function defaultIdentifier(limit, windowS) {
  if (!windowS) return "default";
  const minutes = windowS / 60, hours = windowS / 3600, days = windowS / 86400;
  if (windowS < 60) return `${limit}-in-${windowS}sec`;
  if (minutes < 60) return `${limit}-in-${minutes}min`;
  if (hours < 24) return `${limit}-in-${hours}hr${hours > 1 ? "s" : ""}`;
  return `${limit}-in-${days}day${days > 1 ? "s" : ""}`;
}
const partitionKey = (key) => Buffer.from(crypto.createHash("sha256").update(String(key)).digest("hex").slice(0, 12)).toString("base64");

/** Checks and completes the options once, when the middleware is made; what names the adapter in errors. */
function parse(opts, what) {
  if (!opts || typeof opts !== "object") throw new TypeError(`${what}: options are required: {client, limit or path, …}`);
  const o = { ...opts };
  if (!o.client || !isFn(o.client.acquire)) throw new TypeError(`${what}: client must be a sluice Client`);
  if (o.max != null && o.limit != null) throw new TypeError("give limit or max (its older name), not both");
  if (o.key != null && o.keyGenerator != null) throw new TypeError("give key or keyGenerator (its express-rate-limit name), not both");
  const erlLimit = o.max != null || typeof o.limit === "number" || isFn(o.limit);
  const out = { client: o.client, path: o.path ?? null, inline: null, limitFn: null, window: null };
  if (erlLimit) {
    if (o.path != null) throw new TypeError("give path (budget tree) or limit (inline), not both");
    const windowMs = o.windowMs ?? 60000;
    if (!(Number.isInteger(windowMs) && windowMs >= 1 && windowMs <= MAX_WINDOW_MS))
      throw new RangeError(`windowMs must be whole milliseconds from 1 to ${MAX_WINDOW_MS} (3650 days), not ${windowMs}`);
    const lim = o.limit ?? o.max;
    if (!isFn(lim)) limitNumber(lim, o.limit != null ? "limit" : "max");
    const algo = o.algo ?? "fixed_window"; // express-rate-limit's MemoryStore counts fixed windows
    out.inline = (n) => ({ rate: n, per: `${windowMs}ms`, algo });
    out.limitFn = isFn(lim) ? lim : () => lim;
    out.window = windowMs / 1000;
  } else {
    if (o.windowMs != null) throw new TypeError("windowMs goes with limit as a number of requests (express-rate-limit's form); an inline limit {rate, per} says its window in per");
    if (o.algo != null) throw new TypeError("algo goes with limit as a number; an inline limit {rate, per, algo} says its own");
    if ((o.path == null) === (o.limit == null))
      throw new TypeError("give either path (budget tree) or limit (inline: a number of requests per windowMs, or {rate, per, burst, algo})");
    if (o.limit != null) {
      if (typeof o.limit !== "object" || o.limit.rate == null) throw new TypeError("limit must be a number of requests per windowMs, a function of the request giving one, or {rate, per, burst, algo}");
      out.inline = () => o.limit;
    }
    if (o.window != null && !(o.window > 0)) throw new RangeError(`window must be seconds above 0 (for RateLimit-Policy), not ${o.window}`);
    out.window = windowOf(o.limit, o.window);
  }
  out.cost = isFn(o.cost) ? o.cost : costNumber(o.cost);
  out.key = fnOpt(o, o.keyGenerator != null ? "keyGenerator" : "key") || null;
  if (o.prefix != null && typeof o.prefix !== "string") throw new TypeError(`prefix must be a string (put before every key), not ${typeof o.prefix}`);
  out.prefix = o.prefix ?? "";
  out.skip = fnOpt(o, "skip");
  out.handler = fnOpt(o, "handler");
  out.requestWasSuccessful = fnOpt(o, "requestWasSuccessful");
  out.skipFailed = boolOpt(o, "skipFailedRequests", false);
  out.skipSuccessful = boolOpt(o, "skipSuccessfulRequests", false);
  out.ttl = o.reservationTtl;
  if (out.ttl != null && !(Number.isInteger(out.ttl) && out.ttl >= 1 && out.ttl <= 3600000))
    throw new RangeError(`reservationTtl must be whole milliseconds from 1 to 3600000, not ${out.ttl}`);
  const statusCode = o.statusCode ?? 429;
  if (!(Number.isInteger(statusCode) && statusCode >= 400 && statusCode <= 599)) throw new RangeError(`statusCode must be an integer from 400 to 599, not ${statusCode}`);
  out.statusCode = statusCode;
  if (o.message != null && !["string", "object", "function"].includes(typeof o.message)) throw new TypeError("message must be a string, an object (sent as JSON) or a function of the request");
  out.message = o.message ?? null;
  const erlHeaders = o.standardHeaders !== undefined || o.legacyHeaders !== undefined;
  if (erlHeaders && o.headers !== undefined) throw new TypeError("give headers (sluice's own set) or standardHeaders/legacyHeaders (express-rate-limit's), not both");
  let standard = o.standardHeaders ?? false;
  if (standard === true) standard = "draft-6";
  if (!(standard === false || DRAFTS.includes(standard)))
    throw new RangeError(`standardHeaders must be false, true (draft-6), "draft-6", "draft-7" or "draft-8", not ${JSON.stringify(o.standardHeaders)}`);
  out.standard = standard;
  out.legacy = erlHeaders ? boolOpt(o, "legacyHeaders", true) : false;
  out.sluiceHeaders = erlHeaders ? false : boolOpt(o, "headers", true);
  if (o.identifier != null && typeof o.identifier !== "string" && !isFn(o.identifier)) throw new TypeError("identifier must be a string or a function of the request");
  out.identifier = o.identifier ?? null;
  out.prop = o.requestPropertyName ?? "rateLimit";
  if (typeof out.prop !== "string" || !out.prop) throw new TypeError("requestPropertyName must be a non-empty string");
  return out;
}

/** The decision for one request: {skip} or {d, key, cost}; args are what the user's functions get. */
async function decide(o, args, ip) {
  if (o.skip && (await o.skip(...args))) return { skip: true };
  let key = o.key ? await o.key(...args) : o.path != null ? ip : "ip:" + ip;
  if (key == null) return { skip: true };
  if (o.prefix) key = o.prefix + key;
  const cost = isFn(o.cost) ? costNumber(await o.cost(...args)) : o.cost;
  let lim = null;
  if (o.inline) lim = o.inline(o.limitFn ? limitNumber(await o.limitFn(...args), "limit(request)") : undefined);
  const held = o.skipFailed || o.skipSuccessful; // counted once the response says whether it counts
  const c = o.client;
  let d;
  if (o.path != null) {
    const k = key === "" ? undefined : String(key);
    d = held ? await c.reserve(o.path, { key: k, estimate: cost ?? 1, ttl: o.ttl }) : await c.acquireBudget(o.path, { key: k, cost });
  } else {
    d = held ? await c.reserve(String(key), { ...lim, estimate: cost ?? 1, ttl: o.ttl }) : await c.acquire(String(key), { ...lim, cost });
  }
  return { d, key: String(key), cost: cost ?? 1 };
}

/** express-rate-limit's request property: limit, used, remaining, resetTime, key; and the decision. */
function info(d, key) {
  const limit = Math.max(0, d.limit), remaining = Math.max(0, d.remaining);
  return { limit, used: limit - remaining, remaining, resetTime: new Date(Date.now() + Math.max(0, d.resetAfter)), key, decision: d };
}

/** The rate-limit headers of a decision, as [name, value] pairs (multiple RateLimit fields in draft-8 are one each). */
async function headerList(o, d, key, args) {
  if (d.limit < 0) return [];
  if (o.sluiceHeaders) return headers.rateHeaders(d, d.source === "fallback" ? null : o.window);
  const out = [];
  const rem = d.degraded || d.remaining < 0 ? 0 : d.remaining;
  const reset = headers.ceilSeconds(d.resetAfter);
  const w = o.window && d.source !== "fallback" ? Math.max(1, Math.ceil(o.window)) : null;
  if (o.legacy) {
    out.push(["X-RateLimit-Limit", String(d.limit)], ["X-RateLimit-Remaining", String(rem)],
      ["X-RateLimit-Reset", String(Math.ceil((Date.now() + Math.max(0, d.resetAfter)) / 1000))]);
  }
  if (o.standard === "draft-6") {
    if (w) out.push(["RateLimit-Policy", `${d.limit};w=${w}`]);
    out.push(["RateLimit-Limit", String(d.limit)], ["RateLimit-Remaining", String(rem)], ["RateLimit-Reset", String(reset)]);
  } else if (o.standard === "draft-7") {
    if (w) out.push(["RateLimit-Policy", `${d.limit};w=${w}`]);
    out.push(["RateLimit", `limit=${d.limit}, remaining=${rem}, reset=${reset}`]);
  } else if (o.standard === "draft-8") {
    const name = o.identifier == null ? defaultIdentifier(d.limit, o.window) : isFn(o.identifier) ? await o.identifier(...args) : o.identifier;
    const pk = partitionKey(key);
    out.push(["RateLimit", `"${name}"; r=${rem}; t=${reset}`], ["RateLimit-Policy", `"${name}"; q=${d.limit};${w ? ` w=${w};` : ""} pk=:${pk}:`]);
  }
  return out;
}

/** Retry-After of a fail-closed answer: until the client's breaker lets a call through, at least 1 s. */
const unavailableRetryAfter = (c) => String(Math.max(1, headers.ceilSeconds(c.breaker && c.breaker.retryIn ? c.breaker.retryIn() : 1000)));

/** Settles or releases a held reservation when the response ends, as it counts: res is Node's ServerResponse. */
function track(o, res, args, d, cost) {
  if (!d.id) return; // decided by the failure policy, or let through over degrade: nothing held
  let done = false;
  const end = (counted) => {
    if (done) return;
    done = true;
    (counted ? o.client.settle(d, cost) : o.client.release(d)).catch(() => {}); // unsettled: its TTL settles it at the cost
  };
  res.once("finish", () => {
    const finished = Promise.resolve().then(() => (o.requestWasSuccessful ? o.requestWasSuccessful(...args) : res.statusCode < 400));
    finished.then((ok) => end(!((o.skipFailed && !ok) || (o.skipSuccessful && ok))), () => end(true));
  });
  res.once("close", () => { if (!res.writableEnded) end(!o.skipFailed); });
  res.once("error", () => end(!o.skipFailed));
}

/** The refusal's body and type: message (string, object, function) or the problem+json of SPEC §10. */
async function refusalBody(o, d, args) {
  if (o.message == null) return ["application/problem+json", headers.problem429(d)];
  const m = isFn(o.message) ? await o.message(...args) : o.message;
  return typeof m === "string" ? ["text/plain; charset=utf-8", m] : ["application/json; charset=utf-8", JSON.stringify(m)];
}

const handlerInfo = (o, d, key) => ({ ...info(d, key), statusCode: o.statusCode, message: o.message });
const ipOf = (req) => req.ip || (req.socket && req.socket.remoteAddress) || "";

/**
 * Express (or node:http) middleware, (req, res, next). keyGenerator, skip,
 * cost, limit (as a function), message, handler and requestWasSuccessful get
 * (req, res); handler (req, res, next, info).
 */
function express(opts) {
  const o = parse(opts, "express");
  return function sluiceLimit(req, res, next) {
    decide(o, [req, res], ipOf(req)).then(async (r) => {
      if (r.skip) return next();
      const { d, key } = r;
      req.sluice = d;
      req[o.prop] = info(d, key);
      if (d.source === "fail_open") return next();
      if (d.source === "fail_closed") {
        res.statusCode = 503;
        res.setHeader("Retry-After", unavailableRetryAfter(o.client));
        res.setHeader("Content-Type", "application/problem+json");
        return res.end(headers.PROBLEM_503);
      }
      for (const [n, v] of await headerList(o, d, key, [req, res])) res.setHeader(n, v);
      if (d.allowed) {
        track(o, res, [req, res], d, r.cost);
        return next();
      }
      const ra = headers.retryAfter(d);
      if (ra != null) res.setHeader("Retry-After", ra);
      if (o.handler) return o.handler(req, res, next, handlerInfo(o, d, key));
      const [type, body] = await refusalBody(o, d, [req, res]);
      res.statusCode = o.statusCode;
      res.setHeader("Content-Type", type);
      res.end(body);
    }).then(undefined, next);
  };
}

/**
 * A Fastify plugin: app.register(sluice.fastify, options) limits every route
 * of the context it is registered in (and its children). keyGenerator, skip,
 * cost, limit (as a function), message and requestWasSuccessful get
 * (request, reply); handler (request, reply, info) must send the reply.
 */
function fastify(instance, opts, done) {
  let o;
  try { o = parse(opts, "fastify"); } catch (e) { return done(e); }
  for (const name of ["sluice", o.prop]) if (!instance.hasRequestDecorator(name)) instance.decorateRequest(name, null);
  instance.addHook("onRequest", async (request, reply) => {
    const args = [request, reply];
    const r = await decide(o, args, request.ip);
    if (r.skip) return;
    const { d, key } = r;
    request.sluice = d;
    request[o.prop] = info(d, key);
    if (d.source === "fail_open") return;
    if (d.source === "fail_closed") {
      reply.code(503).header("Retry-After", unavailableRetryAfter(o.client)).type("application/problem+json").send(headers.PROBLEM_503);
      return reply;
    }
    for (const [n, v] of await headerList(o, d, key, args)) reply.header(n, v);
    if (d.allowed) { track(o, reply.raw, args, d, r.cost); return; }
    const ra = headers.retryAfter(d);
    if (ra != null) reply.header("Retry-After", ra);
    if (o.handler) { await o.handler(request, reply, handlerInfo(o, d, key)); return reply; }
    const [type, body] = await refusalBody(o, d, args);
    reply.code(o.statusCode).type(type).send(body);
    return reply;
  });
  done();
}
// As fastify-plugin marks a plugin: its hook applies to the context that registers it, not a child of its own.
fastify[Symbol.for("skip-override")] = true;
fastify[Symbol.for("fastify.display-name")] = "@sluice-rl/sluice";
fastify[Symbol.for("plugin-meta")] = { name: "@sluice-rl/sluice", fastify: ">=4" };

/**
 * Koa middleware, async (ctx, next). keyGenerator, skip, cost, limit (as a
 * function), message and requestWasSuccessful get (ctx); handler (ctx, next,
 * info). The decision is in ctx.state.sluice, the counts in ctx.state.rateLimit.
 */
function koa(opts) {
  const o = parse(opts, "koa");
  return async function sluiceLimit(ctx, next) {
    const args = [ctx];
    const r = await decide(o, args, ctx.ip);
    if (r.skip) return next();
    const { d, key } = r;
    ctx.state.sluice = d;
    ctx.state[o.prop] = info(d, key);
    if (d.source === "fail_open") return next();
    if (d.source === "fail_closed") {
      ctx.status = 503;
      ctx.set("Retry-After", unavailableRetryAfter(o.client));
      ctx.body = headers.PROBLEM_503;
      ctx.type = "application/problem+json";
      return;
    }
    for (const [n, v] of await headerList(o, d, key, args)) ctx.set(n, v);
    if (d.allowed) {
      track(o, ctx.res, args, d, r.cost);
      return next();
    }
    const ra = headers.retryAfter(d);
    if (ra != null) ctx.set("Retry-After", ra);
    if (o.handler) return o.handler(ctx, next, handlerInfo(o, d, key));
    const [type, body] = await refusalBody(o, d, args);
    ctx.status = o.statusCode;
    ctx.body = body;
    ctx.type = type;
  };
}

module.exports = { express, fastify, koa, windowOf, parse };
