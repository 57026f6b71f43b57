"use strict";
// sluice for Node: a client that asks sluice within a deadline and decides by
// a failure policy when it cannot (circuit breaker, denial cache), on one
// node or several (cluster.js), middleware for Express, Fastify and Koa
// (adapters.js), and a fetch wrapper that paces itself by any API's headers.

const headers = require("./headers.js");
const cooperative = require("./cooperative.js");
const { Pool, parseNodes, parseAddr } = require("./cluster.js");
const adapters = require("./adapters.js");

const TRANSIENT = ["LOADING", "TRYAGAIN", "CLUSTERDOWN"];

/** An error reply the failure policy does not cover (ERR, NOBUDGET, NOAUTH …). */
class SluiceError extends Error {
  constructor(reply) {
    super(reply);
    this.name = "SluiceError";
    this.reply = reply;
    this.code = reply.split(" ", 1)[0];
  }
}
/** sluice's NORESERVATION reply to settle: the reservation is not open (unknown, settled, released or expired). */
class NoReservation extends SluiceError {
  constructor(reply) { super(reply); this.name = "NoReservation"; }
}
const replyError = (msg) => (msg.startsWith("NORESERVATION") ? new NoReservation(msg) : new SluiceError(msg));
/** sluice could not be asked; thrown only by calls without a failure policy (refund, settle, release, renew). */
class Unavailable extends Error {
  constructor(message, cause) { super(message, cause ? { cause } : undefined); this.name = "Unavailable"; }
}
/** The circuit breaker is open. */
class CircuitOpen extends Unavailable {
  constructor() { super("circuit breaker open"); this.name = "CircuitOpen"; }
}
class DeadlineExceeded extends Error {
  constructor(ms) { super(`no reply within ${ms} ms`); this.name = "DeadlineExceeded"; }
}

// ioredis names its error ReplyError; node-redis leaves the name "Error" on
// its SimpleError (an ErrorReply): look at the name and the class.
const isReplyError = (e) => !!e && [e.name, e.constructor && e.constructor.name].some((n) => /Reply|SimpleError/.test(n || ""));
/** Whether err means sluice could not decide (the failure policy applies) rather than that it refused. */
function isTransient(e) {
  if (!isReplyError(e)) return true;
  return TRANSIENT.some((c) => String(e.message).startsWith(c));
}

const decision = (r) => {
  if (!Array.isArray(r) || r.length !== 6) throw new SluiceError(`ERR unexpected reply ${JSON.stringify(r)}`);
  const a = Number(r[0]);
  return { allowed: a !== 0, remaining: Number(r[1]), limit: Number(r[2]), retryAfter: Number(r[3]),
    resetAfter: Number(r[4]), limitedBy: String(r[5]), source: "server", degraded: a === 2 };
};

const reservation = (r) => {
  if (!Array.isArray(r) || r.length !== 7) throw new SluiceError(`ERR unexpected reply ${JSON.stringify(r)}`);
  return { ...decision(r.slice(0, 6)), id: String(r[6]) || null };
};
/** A failure policy's decision as a reservation: nothing is held, so no id. */
const localReservation = (d) => ({ ...d, id: null });
const flag = (r) => Number(r) === 1;
/** The id of a reservation, or an id as given; null when there is none. */
function idOf(r) {
  if (r == null) return null;
  if (typeof r === "string") return r || null;
  if (typeof r === "object" && "id" in r) return r.id || null;
  throw new TypeError(`expected a reservation or a reservation id, not ${r}`);
}
function ttlArg(ttl) {
  if (!(ttl > 0)) throw new RangeError(`ttl must be above 0 ms, not ${ttl}`);
  return Math.ceil(ttl);
}

class Breaker {
  constructor(failures, cooldown, clock) {
    if (!(failures >= 1)) throw new RangeError("breakerFailures must be at least 1");
    Object.assign(this, { failures, cooldown, clock, count: 0, openUntil: null, probing: false });
  }
  get state() {
    if (this.openUntil == null) return "closed";
    return this.probing || this.clock() >= this.openUntil ? "half_open" : "open";
  }
  allow() {
    if (this.openUntil == null) return true;
    if (this.probing || this.clock() < this.openUntil) return false;
    this.probing = true;
    return true;
  }
  /** ms until the breaker lets a call through again (its cooldown while closed): a fail-closed answer's Retry-After. */
  retryIn() { return this.openUntil == null ? this.cooldown : Math.max(0, this.openUntil - this.clock()); }
  success() { this.count = 0; this.openUntil = null; this.probing = false; }
  failure() {
    this.count++;
    if (this.probing || this.count >= this.failures) this.openUntil = this.clock() + this.cooldown;
    this.probing = false;
  }
}

/** Refusals by (key, limit) until their retryAfter; least recently used dropped beyond size. */
class DenialCache {
  constructor(size, clock) { this.size = size; this.clock = clock; this.m = new Map(); }
  get(k, cost) {
    const e = this.m.get(k);
    if (!e) return null;
    const now = this.clock();
    if (now >= e.until) { this.m.delete(k); return null; }
    if (cost < e.cost) return null; // a smaller call may fit sooner
    this.m.delete(k); this.m.set(k, e);
    const d = e.d;
    return { ...d, retryAfter: Math.max(1, Math.ceil(e.until - now)), resetAfter: Math.max(0, d.resetAfter - Math.floor(now - e.at)), source: "cache" };
  }
  put(k, cost, d) {
    if (this.size <= 0 || d.allowed || d.retryAfter <= 0) return;
    const now = this.clock();
    this.m.delete(k);
    this.m.set(k, { until: now + d.retryAfter, cost, d, at: now });
    while (this.m.size > this.size) this.m.delete(this.m.keys().next().value);
  }
  forget(key) { for (const k of this.m.keys()) if (k.split("\u0000")[1] === key) this.m.delete(k); }
  get length() { return this.m.size; }
}

/** The fallback limit: a token bucket per key (rate per `per` ms, burst). */
class LocalBuckets {
  constructor({ rate, per = 1000, burst }, size, clock) {
    if (!(rate > 0)) throw new RangeError("failure.rate must be above 0");
    this.rate = rate / per; this.burst = burst ?? rate; this.size = Math.max(size, 1); this.clock = clock; this.m = new Map();
  }
  take(key, cost, error) {
    const now = this.clock();
    let b = this.m.get(key);
    if (b) this.m.delete(key); else b = { tokens: this.burst, at: now };
    this.m.set(key, b);
    while (this.m.size > this.size) this.m.delete(this.m.keys().next().value);
    b.tokens = Math.min(this.burst, b.tokens + (now - b.at) * this.rate);
    b.at = now;
    const ok = b.tokens >= cost;
    if (ok) b.tokens -= cost;
    const retryAfter = cost > this.burst ? -1 : ok ? 0 : Math.ceil((cost - b.tokens) / this.rate);
    return { allowed: ok, remaining: Math.floor(b.tokens), limit: Math.floor(this.burst), retryAfter,
      resetAfter: Math.ceil((this.burst - b.tokens) / this.rate), limitedBy: String(key), source: "fallback", degraded: false, error };
  }
}

function perArg(per) {
  if (typeof per === "string") return per;
  if (!(Number.isInteger(per) && per >= 1)) throw new RangeError(`per must be a unit ("minute"), a duration ("250ms") or whole milliseconds, not ${per}`);
  return `${per}ms`;
}

const PER_WORDS = { second: 1000, seconds: 1000, sec: 1000, minute: 60000, minutes: 60000, min: 60000, hour: 3600000,
  hours: 3600000, day: 86400000, days: 86400000, week: 604800000, weeks: 604800000 };
const DURATION_UNITS = { ns: 1e-6, us: 1e-3, "\u00b5s": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000, w: 604800000 };
/** per (a unit word, a duration such as "1h30m", or whole ms; default a second) in milliseconds. */
function perMs(per = "second") {
  if (typeof per === "number") { perArg(per); return per; }
  const w = PER_WORDS[String(per).toLowerCase()];
  if (w) return w;
  let ms = 0;
  const re = /(\d+)(ns|us|\u00b5s|ms|s|m|h|d|w)/y;
  let m;
  while (re.lastIndex < per.length && (m = re.exec(per))) ms += Number(m[1]) * DURATION_UNITS[m[2]];
  if (!m || re.lastIndex !== per.length || ms <= 0) throw new RangeError(`per must be a unit ("minute"), a duration ("250ms", "1h30m") or whole milliseconds, not ${JSON.stringify(per)}`);
  return ms;
}
const MAX_TOKENS = 1e12;
function pointsArg(name, n) {
  if (!(Number.isInteger(n) && n >= 0 && n <= MAX_TOKENS)) throw new RangeError(`${name} must be an integer from 0 to ${MAX_TOKENS}, not ${n}`);
  return n;
}

function inlineArgs(cmd, key, o) {
  if (o.rate == null) throw new TypeError("rate is required for an inline limit");
  const args = [cmd, key, "RATE", o.rate];
  if (o.per != null) args.push("PER", perArg(o.per));
  if (o.burst != null) args.push("BURST", o.burst);
  if (o.algo != null) args.push("ALGO", o.algo);
  return args;
}

const waitMs = (o) => (o.wait == null ? 0 : Math.max(0, Math.ceil(o.wait)));

function tail(args, o) {
  if (o.cost != null) args.push("COST", o.cost);
  if (o.wait != null) args.push("WAIT", waitMs(o));
  if (o.dryrun) args.push("DRYRUN");
  return args;
}

/**
 * Asks sluice whether calls may go ahead. Options: redis (an ioredis or
 * node-redis client; default: a new ioredis client on host/port with its
 * queues and retries off), timeout (ms, default 50), failure ("open",
 * "closed" or {rate, per (ms), burst}), breakerFailures (3),
 * breakerCooldown (ms, 1000), denialCacheSize (10000).
 */
class Client {
  constructor(opts = {}) {
    const { timeout = 50, failure = "open", breakerFailures = 3, breakerCooldown = 1000,
      denialCacheSize = 10000, clock = () => performance.now() } = opts;
    if (!(timeout > 0)) throw new RangeError("timeout must be above 0 ms");
    if (!(failure === "open" || failure === "closed" || (failure && typeof failure === "object")))
      throw new TypeError('failure must be "open", "closed" or {rate, per, burst}');
    this.timeout = timeout;
    this.failure = failure;
    this.pool = Client.pool(opts, timeout);
    this.ownRedis = !opts.redis;
    this.breaker = new Breaker(breakerFailures, breakerCooldown, clock);
    this.denials = new DenialCache(denialCacheSize, clock);
    this.local = typeof failure === "object" ? new LocalBuckets(failure, denialCacheSize, clock) : null;
    this.openDecision = this.local ? null : this.policy("", 0, new CircuitOpen());
    this.openPromise = this.openDecision ? Promise.resolve(this.openDecision) : null;
  }

  /** The nodes of opts: a client passed in, nodes (a list, or "dns:NAME[:PORT]"), or host and port. */
  static pool(opts, timeout) {
    const { redis, nodes, host, port = 6380, discover, refreshInterval = 30000 } = opts;
    if (nodes != null && redis) throw new TypeError("give redis (a client) or nodes, not both");
    if (nodes != null && host != null) throw new TypeError("give nodes or host, not both (port is the default port of nodes without one)");
    if (!(Number.isInteger(refreshInterval) && refreshInterval >= 0))
      throw new RangeError(`refreshInterval must be whole milliseconds, 0 (never) or more, not ${refreshInterval}`);
    const common = { discover: !!(discover ?? nodes != null), refreshInterval, isTransient, isDeadline: (e) => e instanceof DeadlineExceeded };
    if (redis) {
      if (discover) throw new TypeError("discover needs nodes or host: a client passed as redis is used alone");
      return new Pool({ ...common, discover: false, redis });
    }
    const { seeds, dns } = nodes != null ? parseNodes(nodes, port) : { seeds: [parseAddr({ host: host ?? "127.0.0.1", port }, 6380, "host and port")], dns: null };
    return new Pool({ ...common, seeds, dnsName: dns, connect: (h, p) => Client.connect({ ...opts, host: h, port: p, timeout }) });
  }

  /** The client of the first node (a client passed as redis: that one). */
  get redis() { return this.pool.nodes.length ? this.pool.nodes[0].redis : null; }

  /**
   * The nodes known now: address, id once learnt, "ready", "connecting" or
   * "down", whether it was given (seed) or learnt, and whether calls go to it now (current).
   */
  get nodes() {
    return this.pool.nodes.map((n) => ({ addr: n.addr, id: n.id, state: n.state, seed: n.seed, current: n === this.pool.cur }));
  }

  /** An ioredis client that fails at once instead of queueing or retrying. */
  static connect({ host = "127.0.0.1", port = 6380, username, password, tls, timeout = 50 } = {}) {
    let Redis;
    try { Redis = require("ioredis"); } catch (e) {
      throw new Error("sluice: pass a client as {redis}, or install ioredis (npm install ioredis)", { cause: e });
    }
    const r = new Redis({ host, port, username, password, tls, enableOfflineQueue: false, maxRetriesPerRequest: 0,
      connectTimeout: Math.max(timeout, 1000), retryStrategy: (n) => Math.min(n * 50, 1000), lazyConnect: false });
    r.on("error", () => {}); // failures reach the caller as decisions; reconnects go on
    return r;
  }

  policy(key, cost, error) {
    if (this.local) return this.local.take(key, cost, error);
    const open = this.failure === "open";
    return { allowed: open, remaining: -1, limit: -1, retryAfter: 0, resetAfter: 0, limitedBy: "",
      source: open ? "fail_open" : "fail_closed", degraded: false, error };
  }

  /** The policy's decision while the breaker is open, when it depends on nothing else. */
  fast() {
    const b = this.breaker;
    if (b.openUntil == null || !this.openPromise || this.denials.m.size) return null;
    return b.probing || b.clock() < b.openUntil ? this.openPromise : null;
  }

  /** One command within the deadline (timeout + wait ms), on the first node that answers. */
  async call(args, wait = 0) {
    const ms = this.timeout + wait;
    let timer;
    const deadline = new Promise((_, reject) => { timer = setTimeout(() => reject(new DeadlineExceeded(ms)), ms); });
    deadline.catch(() => {});
    try {
      return await this.pool.call(args, deadline);
    } finally {
      clearTimeout(timer);
    }
  }

  /** One call under the failure policy; wait (ms) is the WAIT it sends, by which its deadline grows. */
  async decide(args, cacheKey, key, cost, { convert = decision, local = (d) => d, wait = 0 } = {}) {
    if (cacheKey != null) {
      const d = this.denials.get(cacheKey, cost);
      if (d) return d;
    }
    if (!this.breaker.allow()) return local(this.policy(key, cost, new CircuitOpen()));
    let reply;
    try {
      reply = await this.call(args, wait);
    } catch (e) {
      if (isTransient(e)) { this.breaker.failure(); return local(this.policy(key, cost, e)); }
      this.breaker.success();
      throw replyError(String(e.message));
    }
    this.breaker.success();
    const d = convert(reply);
    if (cacheKey != null) this.denials.put(cacheKey, cost, d);
    return d;
  }

  async strict(args, convert = decision) {
    if (!this.breaker.allow()) throw new CircuitOpen();
    let reply;
    try {
      reply = await this.call(args);
    } catch (e) {
      if (isTransient(e)) { this.breaker.failure(); throw new Unavailable(String(e.message), e); }
      this.breaker.success();
      throw replyError(String(e.message));
    }
    this.breaker.success();
    return convert(reply);
  }

  /** RL.ACQUIRE key RATE n [PER per] [BURST b] [ALGO a] [COST c] [WAIT ms] [DRYRUN]. */
  acquire(key, o = {}) {
    const f = this.fast();
    if (f) return f;
    const cacheKey = o.wait == null && !o.dryrun ? ["inline", key, o.rate, o.per, o.burst, o.algo].join("\u0000") : null;
    return this.decide(tail(inlineArgs("RL.ACQUIRE", key, o), o), cacheKey, key, o.cost ?? 1, { wait: waitMs(o) });
  }

  /** RL.ACQUIRE path [KEY key] [COST c] [WAIT ms] [DRYRUN]: the budget tree's limit. */
  acquireBudget(path, o = {}) {
    const f = this.fast();
    if (f) return f;
    const target = o.key == null ? path : `${path}#${o.key}`;
    const args = ["RL.ACQUIRE", path];
    if (o.key != null) args.push("KEY", o.key);
    const cacheKey = o.wait == null && !o.dryrun ? ["budget", target].join("\u0000") : null;
    return this.decide(tail(args, o), cacheKey, target, o.cost ?? 1, { wait: waitMs(o) });
  }

  /** RL.PEEK with an inline limit: nothing consumed. */
  peek(key, o = {}) { return this.decide(tail(inlineArgs("RL.PEEK", key, o), { cost: o.cost }), null, key, o.cost ?? 1); }

  /** RL.PEEK on a budget path. */
  peekBudget(path, o = {}) {
    const args = ["RL.PEEK", path];
    if (o.key != null) args.push("KEY", o.key);
    return this.decide(tail(args, { cost: o.cost }), null, o.key == null ? path : `${path}#${o.key}`, o.cost ?? 1);
  }

  /** RL.REFUND: gives cost tokens back; throws Unavailable when sluice cannot be asked. */
  refund(key, cost, o = {}) {
    this.denials.forget(key);
    return this.strict(tail(inlineArgs("RL.REFUND", key, o), { cost }));
  }

  /** RL.REFUND on a budget path. */
  refundBudget(path, cost, o = {}) {
    const args = ["RL.REFUND", path];
    if (o.key != null) args.push("KEY", o.key);
    this.denials.forget(o.key == null ? path : `${path}#${o.key}`);
    return this.strict(tail(args, { cost }));
  }

  /** CL.THROTTLE key maxBurst count period(s) quantity, as a Decision in ms (limit = maxBurst + 1). */
  throttle(key, maxBurst, count, period, quantity = 1) {
    const conv = (r) => {
      const [limited, limit, remaining, retryS, resetS] = r.map(Number);
      return { allowed: limited === 0, remaining, limit, retryAfter: limited === 0 ? 0 : retryS >= 0 ? retryS * 1000 : -1,
        resetAfter: resetS * 1000, limitedBy: key, source: "server", degraded: false };
    };
    return this.decide(["CL.THROTTLE", key, maxBurst, count, period, quantity],
      ["throttle", key, maxBurst, count, period].join("\u0000"), key, quantity, { convert: conv });
  }

  /**
   * Charges points to key beyond what its limit admits (rate-limiter-flexible's
   * penalty): RL.RESERVE key <limit> COST 0, then RL.SETTLE id ACTUAL points,
   * which sluice never refuses, so the bucket may go into debt and later calls
   * wait for it. Resolves to the levels afterwards; when the key is already in
   * debt (refused even at cost 0) nothing more can be charged, and it resolves
   * to that refusal (allowed false). Rejects with Unavailable when sluice
   * cannot be asked. Limiter role.
   */
  penalty(key, points, o = {}) {
    pointsArg("points", points);
    return this.charge(key, null, points, () => tail(inlineArgs("RL.RESERVE", key, o), { cost: 0 }));
  }

  /** penalty on a budget path (for opts.key): every level RL.ACQUIRE path KEY key charges. */
  penaltyBudget(path, points, o = {}) {
    pointsArg("points", points);
    return this.charge(o.key == null ? path : `${path}#${o.key}`, null, points, () => {
      const args = ["RL.RESERVE", path];
      if (o.key != null) args.push("KEY", o.key);
      return args.concat("COST", 0);
    });
  }

  /**
   * Refuses key for at least ms (less than two tokens' refill longer; one when ms is whole tokens)
   * (rate-limiter-flexible's block): a penalty of what is left plus ms of
   * refill at the limit's rate. For the refilling algorithms: token_bucket
   * (the default), gcra and leaky_bucket. A key already in debt is left as it is.
   */
  block(key, ms, o = {}) {
    if (!(Number.isFinite(ms) && ms >= 1)) throw new RangeError(`ms must be at least 1 (milliseconds to block), not ${ms}`);
    if (o.rate == null) throw new TypeError("rate is required: block charges ms of refill at the limit's rate");
    if (o.algo != null && !["token_bucket", "gcra", "leaky_bucket"].includes(o.algo))
      throw new TypeError(`block works on token_bucket, gcra or leaky_bucket limits, not algo ${JSON.stringify(o.algo)}: a window's count does not refill by time`);
    const owed = Math.ceil(ms * o.rate / perMs(o.per));
    if (!(owed <= MAX_TOKENS)) throw new RangeError(`ms ${ms} at rate ${o.rate} per ${o.per ?? "second"} is more than ${MAX_TOKENS} tokens`);
    return this.charge(key, owed, 0, () => tail(inlineArgs("RL.RESERVE", key, o), { cost: 0 }));
  }

  /** RL.RESERVE … COST 0 for an id, then RL.SETTLE id ACTUAL points (+ what is left, plus owed, when owed is given). */
  async charge(key, owed, points, args) {
    const r = await this.strict(args(), reservation);
    if (!r.id) { const { id, ...d } = r; return d; }
    this.denials.forget(key);
    const actual = owed == null ? points : Math.min(MAX_TOKENS, Math.max(0, r.remaining) + owed);
    return this.strict(["RL.SETTLE", r.id, "ACTUAL", actual]);
  }

  /** RL.RESET key: forgets its bucket, leaving it full (rate-limiter-flexible's delete); whether there was one. Admin role. */
  delete(key) {
    this.denials.forget(key);
    return this.strict(["RL.RESET", key], flag);
  }

  /** RL.RESET path [KEY key]: the call's own bucket, not the aggregates it shares; whether there was one. Admin role. */
  deleteBudget(path, o = {}) {
    const args = ["RL.RESET", path];
    if (o.key != null) args.push("KEY", o.key);
    this.denials.forget(o.key == null ? path : `${path}#${o.key}`);
    return this.strict(args, flag);
  }

  /**
   * RL.RESERVE: admits opts.estimate tokens and holds them until settle, release
   * or the TTL (ttl ms; the server's default is 60 s). Budget form: target is a
   * path, key its subject. Inline form: target is a key limited by rate (per,
   * burst, algo), quota (quotaPer, quotaTz) and/or concurrency. The failure
   * policy decides when sluice cannot; its reservations hold nothing (id null).
   * Refusals are not cached: a release frees a concurrency slot at any moment.
   */
  reserve(target, o = {}) {
    if (o.estimate == null) throw new TypeError("estimate is required: the tokens the work may take at most");
    if (o.quota == null && (o.quotaPer != null || o.quotaTz != null)) throw new TypeError("quotaPer and quotaTz belong to quota");
    const args = ["RL.RESERVE", target];
    if (o.rate != null) args.push("RATE", o.rate);
    if (o.per != null) args.push("PER", perArg(o.per));
    if (o.burst != null) args.push("BURST", o.burst);
    if (o.algo != null) args.push("ALGO", o.algo);
    if (o.quota != null) args.push("QUOTA", o.quota);
    if (o.quotaPer != null) args.push("PER", o.quotaPer);
    if (o.quotaTz != null) args.push("TZ", o.quotaTz);
    if (o.concurrency != null) args.push("CONCURRENCY", o.concurrency);
    if (o.key != null) args.push("KEY", o.key);
    args.push("COST", o.estimate);
    if (o.ttl != null) args.push("TTL", ttlArg(o.ttl));
    if (o.wait != null) args.push("WAIT", waitMs(o));
    return this.decide(args, null, o.key == null ? target : `${target}#${o.key}`, o.estimate,
      { convert: reservation, local: localReservation, wait: waitMs(o) });
  }

  /**
   * RL.SETTLE id ACTUAL actual: charges the real cost (the difference from the
   * estimate goes back or is charged, never refused); resolves to the levels
   * afterwards, or null without sending anything for a reservation without an
   * id. Rejects with NoReservation when it is not open, Unavailable when sluice
   * cannot be asked.
   */
  async settle(r, actual) {
    const id = idOf(r);
    return id == null ? null : this.strict(["RL.SETTLE", id, "ACTUAL", actual]);
  }

  /** RL.RELEASE id: the work did not happen; whether it was open (false, nothing sent, without an id). */
  async release(r) {
    const id = idOf(r);
    return id == null ? false : this.strict(["RL.RELEASE", id], flag);
  }

  /** RL.RENEW id TTL ms: it now expires ttl ms from now; whether it was open (false, nothing sent, without an id). */
  async renew(r, ttl) {
    const ms = ttlArg(ttl);
    const id = idOf(r);
    return id == null ? false : this.strict(["RL.RENEW", id, "TTL", ms], flag);
  }

  /**
   * reserve(target, opts), then fn(r) with the reservation and its settle(actual),
   * release() and renew(ttl); resolves to what fn resolves to. A reservation fn
   * neither settled nor released, because it threw or not, is released; if
   * sluice cannot be asked then, it expires after its TTL at its estimate.
   */
  async withReservation(target, opts, fn) {
    const res = await this.reserve(target, opts);
    let ended = false;
    const r = { ...res,
      settle: async (actual) => { const d = await this.settle(res, actual); ended = true; return d; },
      release: async () => { const ok = await this.release(res); ended = true; return ok; },
      renew: (ttl) => this.renew(res, ttl) };
    try {
      return await fn(r);
    } finally {
      if (!ended) await this.release(res).catch((e) => { if (!(e instanceof Unavailable)) throw e; });
    }
  }

  /** Closes the client it made (not one passed in). */
  async close() { this.pool.close(); }
}

module.exports = {
  Client, SluiceError, NoReservation, Unavailable, CircuitOpen, DeadlineExceeded, isTransient,
  express: adapters.express, fastify: adapters.fastify, koa: adapters.koa,
  headers, cooperativeFetch: cooperative.cooperativeFetch, Pacer: cooperative.Pacer, RateLimited: cooperative.RateLimited,
};
