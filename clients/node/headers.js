"use strict";
// Rate-limit headers: writing them for a decision (SPEC §10, as sluice's
// own HTTP fronts do) and reading them from any API's responses.

const ceilSeconds = (ms) => Math.max(0, Math.ceil(ms / 1000));

/** The headers of a decision: [name, value] pairs; RateLimit-Policy only when window (s) is known. */
function rateHeaders(d, window) {
  if (d.limit < 0) return [];
  const rem = d.degraded || d.remaining < 0 ? 0 : d.remaining;
  const reset = String(ceilSeconds(d.resetAfter));
  const out = [];
  if (window) out.push(["RateLimit-Policy", `"burst";q=${d.limit};w=${Math.max(Math.ceil(window), 1)}`]);
  out.push(["RateLimit", `"burst";r=${rem};t=${reset}`], ["X-RateLimit-Limit", String(d.limit)],
    ["X-RateLimit-Remaining", String(rem)], ["X-RateLimit-Reset", reset]);
  return out;
}

/** Retry-After of a refusal: whole seconds rounded up, at least 1; null when it can never be admitted. */
function retryAfter(d) {
  return d.retryAfter < 0 ? null : String(Math.max(1, ceilSeconds(d.retryAfter)));
}

function problem429(d) {
  const detail = d.retryAfter < 0
    ? `rate limit exceeded at ${d.limitedBy}; the request costs more than the limit's capacity and can never be admitted`
    : `rate limit exceeded at ${d.limitedBy}; retry in ${retryAfter(d)} s`;
  return `{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,` +
    `"detail":${JSON.stringify(detail)},"limited_by":${JSON.stringify(d.limitedBy)},"retry_after_ms":${d.retryAfter}}\n`;
}

const PROBLEM_503 = '{"type":"https://sluice.dev/problems/limiter-unavailable","title":"Service Unavailable",' +
  '"status":503,"detail":"rate limiting is unavailable; try again later"}\n';

const num = (v) => {
  if (v == null) return null;
  const n = Number(String(v).trim().replace(/^"|"$/g, ""));
  return Number.isFinite(n) ? n : null;
};

/** A structured-field list (RFC 8941): [[item, {param: value}], ...], tolerant. */
function parseList(value) {
  const out = [];
  const re = /\s*(?:"((?:[^"\\]|\\.)*)"|([^;,\s]+))((?:\s*;\s*[A-Za-z*][A-Za-z0-9_.*-]*(?:=(?:"(?:[^"\\]|\\.)*"|[^;,\s]*))?)*)\s*(?:,|$)/y;
  const pre = /;\s*([A-Za-z*][A-Za-z0-9_.*-]*)(?:=("(?:[^"\\]|\\.)*"|[^;,\s]*))?/g;
  const s = value.trim();
  re.lastIndex = 0;
  while (re.lastIndex < s.length) {
    const start = re.lastIndex;
    const m = re.exec(s);
    if (!m || re.lastIndex === start) break;
    const params = {};
    for (const p of (m[3] || "").matchAll(pre)) params[p[1].toLowerCase()] = p[2] == null ? "" : p[2].replace(/^"|"$/g, "");
    out.push([m[1] != null ? m[1] : m[2], params]);
  }
  return out;
}

const resetSeconds = (v, now) => {
  const n = num(v);
  if (n == null) return null;
  return n > 1e9 ? Math.max(0, n - now) : Math.max(0, n); // a Unix time (GitHub's X-RateLimit-Reset) or a delta
};

/**
 * The limits a response's headers describe: [{name, partition, quota, window, remaining, reset}]
 * (seconds). `get(name)` reads a header, case-insensitively (Headers.get, or a function).
 */
function parseLimits(get, now = Date.now() / 1000) {
  const limits = new Map();
  const at = (name, partition = "") => {
    const k = name + "\u0000" + partition;
    if (!limits.has(k)) limits.set(k, { name, partition, quota: null, window: null, remaining: null, reset: null });
    return limits.get(k);
  };
  const pol = get("RateLimit-Policy");
  let cur = get("RateLimit");
  if (cur && /^\s*(limit|remaining|reset)\s*=/i.test(cur)) { // draft-07: RateLimit: limit=10, remaining=9, reset=1
    const d = Object.fromEntries([...cur.matchAll(/(\w+)\s*=\s*([^,]+)/g)].map((m) => [m[1].toLowerCase(), m[2]]));
    Object.assign(at("default"), { quota: num(d.limit), remaining: num(d.remaining), reset: resetSeconds(d.reset, now) });
    cur = null;
  }
  if (pol) {
    for (const [item, p] of parseList(pol)) {
      if (/^\d+(\.\d+)?$/.test(item)) { // draft-03…07: RateLimit-Policy: 10;w=1
        const l = at("default");
        if (l.quota == null) l.quota = num(item);
        if (l.window == null) l.window = num(p.w);
        continue;
      }
      Object.assign(at(item, p.pk || ""), { quota: num(p.q), window: num(p.w) });
    }
  }
  if (cur) {
    for (const [item, p] of parseList(cur)) Object.assign(at(item, p.pk || ""), { remaining: num(p.r), reset: resetSeconds(p.t, now) });
  }
  if (![...limits.values()].some((l) => l.remaining != null)) {
    for (const prefix of ["RateLimit-", "X-RateLimit-"]) {
      const rem = get(prefix + "Remaining");
      if (rem == null) continue;
      const l = at("default");
      l.remaining = num(rem);
      if (l.quota == null) l.quota = num((get(prefix + "Limit") || "").split(",")[0] || null);
      l.reset = resetSeconds(get(prefix + "Reset"), now);
      break;
    }
  }
  return [...limits.values()].filter((l) => l.remaining != null || l.quota != null);
}

/** Retry-After in seconds: a number of seconds or an HTTP date; null if absent or unreadable. */
function parseRetryAfter(v, now = Date.now()) {
  if (v == null) return null;
  const n = num(v);
  if (n != null) return Math.max(0, n);
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : Math.max(0, (t - now) / 1000);
}

module.exports = { rateHeaders, retryAfter, problem429, PROBLEM_503, parseList, parseLimits, parseRetryAfter, ceilSeconds };
