"use strict";
// The cooperative client: follow the rate-limit headers of the API you call,
// so that it never has to refuse you. The same rules as the Python package's
// sluice.cooperative: with a policy (q per w s) a token bucket of q refilled
// at q/w, set to r at each answer; without one, the remaining requests
// spread over the time to reset, then the reset; after a 429 or 503 with
// Retry-After, that long plus up to `jitter` of it.

const { parseLimits, parseRetryAfter } = require("./headers.js");

/** The request was not sent: the API would refuse it for retryAfter more ms than the caller would wait. */
class RateLimited extends Error {
  constructor(host, retryAfter) {
    super(`rate limited by ${host}: next request allowed in ${Math.round(retryAfter)} ms`);
    this.name = "RateLimited";
    this.host = host;
    this.retryAfter = retryAfter;
  }
}

class State {
  constructor() { Object.assign(this, { tokens: null, stamp: 0, rate: null, cap: 0, resetAt: 0, interval: 0, nextAt: 0 }); }
  refill(now) {
    if (this.tokens == null) return;
    if (this.rate) this.tokens = Math.min(this.cap, this.tokens + (now - this.stamp) * this.rate);
    else if (now >= this.resetAt) this.tokens = null; // reset passed: unknown until the next answer
    this.stamp = now;
  }
  wait(now) {
    this.refill(now);
    if (this.tokens == null || this.tokens >= 1) return this.rate ? 0 : Math.max(0, this.nextAt - now);
    return this.rate ? (1 - this.tokens) / this.rate : Math.max(0, this.resetAt - now);
  }
  take(now) {
    this.refill(now);
    if (this.tokens != null) this.tokens -= 1;
    this.nextAt = now + this.interval;
  }
  learn(now, remaining, reset, quota, window) { // times in ms
    if (quota && window && this.rate === quota / window && this.tokens != null) {
      this.refill(now);
      // The projection keeps the fraction of a token the server's whole count
      // drops; it never runs ahead of the server, having started from a count
      // that did not, so keep it while the two agree.
      if (Math.floor(this.tokens) !== remaining) this.tokens = remaining;
    } else this.tokens = remaining;
    this.stamp = now;
    const t = reset != null ? reset : (window || 0);
    this.resetAt = now + t;
    if (quota && window) { this.rate = quota / window; this.cap = quota; return; }
    this.rate = null;
    this.interval = t > 0 ? t / (remaining + 1) : 0;
    this.nextAt = remaining >= 1 ? now + this.interval : this.resetAt;
  }
}

/** Per host and policy, when the next request may go (times in ms). */
class Pacer {
  constructor({ maxWait = 30000, jitter = 0.1, clock = () => performance.now() } = {}) {
    Object.assign(this, { maxWait, jitter, clock, hosts: new Map(), blocked: new Map(), inflight: new Map() });
  }
  waitFor(host, now) {
    let w = Math.max(0, (this.blocked.get(host) || 0) - now);
    for (const s of (this.hosts.get(host) || new Map()).values()) w = Math.max(w, s.wait(now));
    return w;
  }
  /** ms to wait before sending to host (0: the slot is taken); throws RateLimited beyond maxWait. */
  reserve(host, maxWait = this.maxWait) {
    const now = this.clock();
    const w = this.waitFor(host, now);
    if (w > maxWait) throw new RateLimited(host, w);
    if (w === 0) {
      for (const s of (this.hosts.get(host) || new Map()).values()) s.take(now);
      this.inflight.set(host, (this.inflight.get(host) || 0) + 1);
    }
    return w;
  }
  /** Resolves when a request to host may go; rejects with RateLimited beyond maxWait. */
  async acquire(host, maxWait = this.maxWait) {
    const deadline = this.clock() + maxWait;
    for (;;) {
      const w = this.reserve(host, Math.max(0, deadline - this.clock()));
      if (w === 0) return;
      await new Promise((ok) => setTimeout(ok, Math.ceil(w)));
    }
  }
  /** Learns from a response; get(name) reads a header (null: the request failed without one). */
  update(host, status, get) {
    const now = this.clock();
    const inflight = (this.inflight.has(host) ? this.inflight.get(host) : 1) - 1;
    this.inflight.set(host, Math.max(0, inflight));
    if (!get) return;
    if (!this.hosts.has(host)) this.hosts.set(host, new Map());
    const pols = this.hosts.get(host);
    for (const l of parseLimits(get)) {
      const k = l.name + "\u0000" + l.partition;
      if (!pols.has(k)) pols.set(k, new State());
      if (l.remaining == null) continue;
      // Others in flight may already have spent some of it.
      pols.get(k).learn(now, Math.max(0, l.remaining - inflight), l.reset == null ? null : l.reset * 1000,
        l.quota, l.window == null ? null : l.window * 1000);
    }
    if (status === 429 || status === 503) {
      let ra = parseRetryAfter(get("Retry-After"));
      if (ra == null && status === 429) ra = 1;
      if (ra != null) this.blocked.set(host, Math.max(this.blocked.get(host) || 0, now + ra * 1000 * (1 + Math.random() * this.jitter)));
    }
  }
}

/**
 * A fetch that paces itself by the server's rate-limit headers. Options:
 * fetch (default globalThis.fetch), maxWait (ms, default 30000; 0: fail
 * fast with RateLimited), pacer (share one among several).
 */
function cooperativeFetch(opts = {}) {
  const f = opts.fetch || globalThis.fetch;
  const maxWait = opts.maxWait ?? 30000;
  const pacer = opts.pacer || new Pacer({ maxWait });
  const wrapped = async (input, init) => {
    const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
    const host = url.host.toLowerCase();
    await pacer.acquire(host, maxWait);
    let res;
    try {
      res = await f(input, init);
    } catch (e) {
      pacer.update(host, null, null);
      throw e;
    }
    pacer.update(host, res.status, (n) => res.headers.get(n));
    return res;
  };
  wrapped.pacer = pacer;
  return wrapped;
}

module.exports = { Pacer, RateLimited, cooperativeFetch };
