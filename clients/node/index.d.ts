// Types of @sluice-rl/sluice. Times are milliseconds unless said otherwise.

export type Source = "server" | "cache" | "fallback" | "fail_open" | "fail_closed";

/** One answer to "may this go ahead?". */
export interface Decision {
  allowed: boolean;
  /** Whole tokens left at the tightest level; -1 when nothing limits (fail_open, fail_closed). */
  remaining: number;
  limit: number;
  /** ms until the same call would be admitted; 0 when allowed; -1 never. */
  retryAfter: number;
  /** ms until the tightest level is full again. */
  resetAfter: number;
  limitedBy: string;
  source: Source;
  /** Admitted over a budget node whose strategy is degrade (allowed 2). */
  degraded: boolean;
  /** What made the failure policy decide, when it did. */
  error?: Error;
}

/** A local token bucket per key while sluice cannot answer: rate tokens every per ms (default 1000), at most burst (default rate). */
export interface Fallback { rate: number; per?: number; burst?: number }

/** A node's address: "host:port", "[v6]:port", "host" (the default port) or {host, port}. */
export type NodeAddress = string | { host: string; port?: number };

export interface ClientOptions {
  /** An ioredis or node-redis client, used alone; default: ioredis clients made from host/port or nodes, with their offline queues and retries off. */
  redis?: unknown;
  /**
   * Several nodes: addresses, or "dns:NAME[:PORT]" (every A/AAAA record of NAME).
   * A call goes to one node and, on a connection error, to the next within its deadline;
   * the failure policy decides only when no node answers. Not with host or redis.
   */
  nodes?: NodeAddress | NodeAddress[] | `dns:${string}`;
  /** Learn the cluster's members from RL.CLUSTER NODES (default: true with nodes, false with host). */
  discover?: boolean;
  /** ms between looks at RL.CLUSTER NODES (and the DNS name); 0: only on connecting and on failover (default 30000). */
  refreshInterval?: number;
  host?: string;
  /** The port of host, and of nodes given without one (default 6380). */
  port?: number;
  username?: string;
  password?: string;
  tls?: object;
  /** Deadline of each call, ms (default 50). */
  timeout?: number;
  /** "open" (default), "closed", or a fallback limit. */
  failure?: "open" | "closed" | Fallback;
  breakerFailures?: number;
  breakerCooldown?: number;
  denialCacheSize?: number;
  clock?: () => number;
}

export interface InlineLimit {
  rate: number;
  /** A unit ("second", "minute", …), a duration ("250ms", "5m") or whole milliseconds. */
  per?: string | number;
  burst?: number;
  algo?: "token_bucket" | "gcra" | "sliding_window" | "fixed_window" | "leaky_bucket";
}

export interface CallOptions { cost?: number; wait?: number; dryrun?: boolean }

/**
 * RL.RESERVE's answer: the decision and the id to settle, release or renew it
 * with. id is null when nothing is held on the server: refused, let through over
 * a degrade limit (degraded), or decided by the failure policy (source
 * "fail_open", "fail_closed" or "fallback"); settle, release and renew then send nothing.
 */
export interface Reservation extends Decision { id: string | null }

/** Budget form: target is a path and key its subject. Inline form: rate, quota and/or concurrency limit target itself. */
export interface ReserveOptions {
  /** The tokens the work may take at most (COST). */
  estimate: number;
  key?: string;
  rate?: number;
  per?: string | number;
  burst?: number;
  algo?: InlineLimit["algo"];
  /** A calendar quota of this many tokens per quotaPer (default month) in quotaTz (default UTC). */
  quota?: number;
  quotaPer?: "hour" | "day" | "week" | "month" | "year";
  quotaTz?: string;
  /** At most this many reservations of the key in flight. */
  concurrency?: number;
  /** ms until the reservation is settled at its estimate (the server's default: 60000). */
  ttl?: number;
  /** ms the server may hold the call for a slot or tokens; the deadline grows by it. */
  wait?: number;
}

/** What withReservation's function gets: the reservation and the calls that end it. */
export interface HeldReservation extends Reservation {
  settle(actual: number): Promise<Decision | null>;
  release(): Promise<boolean>;
  renew(ttl: number): Promise<boolean>;
}

export interface NodeState {
  addr: string;
  /** Its --node-id, once learnt from RL.CLUSTER INFO or NODES. */
  id: string | null;
  state: "ready" | "connecting" | "down";
  /** Given in nodes (or host), not learnt. */
  seed: boolean;
  /** Calls go to it now. */
  current: boolean;
}

export class Client {
  constructor(opts?: ClientOptions);
  readonly breaker: { readonly state: "closed" | "open" | "half_open"; retryIn(): number };
  /** The nodes known now. */
  readonly nodes: NodeState[];
  /**
   * Charges points beyond what the limit admits (RL.RESERVE COST 0, then RL.SETTLE ACTUAL points): the bucket may go into debt.
   * A key already in debt resolves to its refusal (allowed false) and nothing is charged. Rejects with Unavailable.
   */
  penalty(key: string, points: number, opts: InlineLimit): Promise<Decision>;
  /** penalty on a budget path, for opts.key. */
  penaltyBudget(path: string, points: number, opts?: { key?: string }): Promise<Decision>;
  /** Refuses key for at least ms (less than two tokens' refill longer): token_bucket, gcra, leaky_bucket. */
  block(key: string, ms: number, opts: InlineLimit): Promise<Decision>;
  /** RL.RESET key (admin role): whether it had a bucket. */
  delete(key: string): Promise<boolean>;
  /** RL.RESET path [KEY key] (admin role): whether the call's own bucket existed. */
  deleteBudget(path: string, opts?: { key?: string }): Promise<boolean>;
  acquire(key: string, opts: InlineLimit & CallOptions): Promise<Decision>;
  acquireBudget(path: string, opts?: { key?: string } & CallOptions): Promise<Decision>;
  peek(key: string, opts: InlineLimit & { cost?: number }): Promise<Decision>;
  peekBudget(path: string, opts?: { key?: string; cost?: number }): Promise<Decision>;
  refund(key: string, cost: number, opts: InlineLimit): Promise<Decision>;
  refundBudget(path: string, cost: number, opts?: { key?: string }): Promise<Decision>;
  /** CL.THROTTLE; period in whole seconds; the decision in ms, limit = maxBurst + 1. */
  throttle(key: string, maxBurst: number, count: number, period: number, quantity?: number): Promise<Decision>;
  /** RL.RESERVE, under the deadline, breaker and failure policy; refusals are not cached. */
  reserve(target: string, opts: ReserveOptions): Promise<Reservation>;
  /** RL.SETTLE: the levels afterwards; null (nothing sent) without an id. Rejects with NoReservation or Unavailable. */
  settle(reservation: Reservation | string | null, actual: number): Promise<Decision | null>;
  /** RL.RELEASE: whether it was open; false (nothing sent) without an id. Rejects with Unavailable. */
  release(reservation: Reservation | string | null): Promise<boolean>;
  /** RL.RENEW with ttl ms: whether it was open; false (nothing sent) without an id. Rejects with Unavailable. */
  renew(reservation: Reservation | string | null, ttl: number): Promise<boolean>;
  /** reserve, then fn; releases what fn did not settle or release, also when it throws. */
  withReservation<T>(target: string, opts: ReserveOptions, fn: (r: HeldReservation) => Promise<T> | T): Promise<T>;
  close(): Promise<void>;
}

export class SluiceError extends Error { reply: string; code: string }
/** NORESERVATION: settle of a reservation that is not open (unknown, settled, released or expired). */
export class NoReservation extends SluiceError {}
export class Unavailable extends Error {}
export class CircuitOpen extends Unavailable {}
export class DeadlineExceeded extends Error {}

/** What a middleware puts on the request (express-rate-limit's request.rateLimit) and passes to handler. */
export interface RateLimitInfo {
  limit: number;
  used: number;
  remaining: number;
  resetTime: Date;
  key: string;
  decision: Decision;
}

/**
 * The options of every adapter. F is what the user's functions get: (req, res)
 * for Express, (request, reply) for Fastify, (ctx) for Koa.
 */
export interface MiddlewareOptions<F extends any[] = [any, any]> {
  client: Client;
  /** Budget path; key gives the subject (default the client IP). */
  path?: string;
  /**
   * Inline: {rate, per, burst, algo}; or express-rate-limit's form, requests per windowMs
   * (a number from 1 to 1e12, or a function of the request), counted in fixed windows (algo to change it).
   */
  limit?: InlineLimit | number | ((...args: F) => number | Promise<number>);
  /** express-rate-limit's older name of limit. */
  max?: number | ((...args: F) => number | Promise<number>);
  /** The window of a limit given as a number, ms from 1 to 3650 days (default 60000). */
  windowMs?: number;
  /** The algorithm of a limit given as a number (default "fixed_window"). */
  algo?: InlineLimit["algo"];
  /** The key (inline) or subject (budget); null or undefined: the request is not limited. Default: the client IP ("ip:" + IP inline). */
  key?: (...args: F) => string | null | undefined | Promise<string | null | undefined>;
  /** express-rate-limit's name of key. */
  keyGenerator?: (...args: F) => string | null | undefined | Promise<string | null | undefined>;
  /** Put before every key: inline keys are one namespace on the server, so give each limiter its own. */
  prefix?: string;
  cost?: number | ((...args: F) => number | Promise<number>);
  /** true: not limited, no headers. */
  skip?: (...args: F) => boolean | Promise<boolean>;
  /** The refusal's status (400–599, default 429). */
  statusCode?: number;
  /** The refusal's body: a string (text/plain), an object (JSON) or a function giving one; default problem+json. */
  message?: string | object | ((...args: F) => string | object | Promise<string | object>);
  /** Answers a refusal instead (Retry-After and the rate-limit headers are set already). */
  handler?: (...args: any[]) => unknown;
  /** Counts a request only once its response says so: failed ones (status ≥ 400, or closed before the end) give their token back. */
  skipFailedRequests?: boolean;
  /** Successful ones give their token back. */
  skipSuccessfulRequests?: boolean;
  /** Default: the response's status is below 400. */
  requestWasSuccessful?: (...args: F) => boolean | Promise<boolean>;
  /** ms a counted-later request's reservation is held (default the server's, 60000): then it counts. */
  reservationTtl?: number;
  /** express-rate-limit's IETF headers: true is "draft-6". Either this or legacyHeaders switches headers off. */
  standardHeaders?: boolean | "draft-6" | "draft-7" | "draft-8";
  /** X-RateLimit-Limit, -Remaining, -Reset (a Unix time), as express-rate-limit (default true once standardHeaders or legacyHeaders is given). */
  legacyHeaders?: boolean;
  /** draft-8's policy name (default "<limit>-in-<window>"). */
  identifier?: string | ((...args: F) => string | Promise<string>);
  /** Where the counts go on the request (default "rateLimit"); the decision is in sluice. */
  requestPropertyName?: string;
  /** Seconds, for sluice's RateLimit-Policy (an inline limit's per by default). */
  window?: number;
  /** sluice's own headers (SPEC §10: RateLimit-Policy, RateLimit, X-RateLimit-*); default true. */
  headers?: boolean;
}
/** Express (or node:http) middleware: (req, res, next). handler gets (req, res, next, info). */
export function express(opts: MiddlewareOptions<[any, any]> & { handler?: (req: any, res: any, next: (err?: any) => void, info: RateLimitInfo & { statusCode: number }) => unknown }): (req: any, res: any, next: (err?: any) => void) => void;
/** A Fastify plugin: app.register(fastify, opts) limits the routes of the context it is registered in. handler (request, reply, info) must send the reply. */
export function fastify(instance: any, opts: MiddlewareOptions<[any, any]> & { handler?: (request: any, reply: any, info: RateLimitInfo & { statusCode: number }) => unknown }, done: (err?: Error) => void): void;
/** Koa middleware: async (ctx, next); the decision in ctx.state.sluice. handler gets (ctx, next, info). */
export function koa(opts: MiddlewareOptions<[any]> & { handler?: (ctx: any, next: () => Promise<any>, info: RateLimitInfo & { statusCode: number }) => unknown }): (ctx: any, next: () => Promise<any>) => Promise<void>;

export class RateLimited extends Error { host: string; retryAfter: number }
export class Pacer {
  constructor(opts?: { maxWait?: number; jitter?: number; clock?: () => number });
  reserve(host: string, maxWait?: number): number;
  acquire(host: string, maxWait?: number): Promise<void>;
  update(host: string, status: number | null, get: ((name: string) => string | null) | null): void;
}
export interface CooperativeFetchOptions { fetch?: typeof fetch; maxWait?: number; pacer?: Pacer }
/** A fetch that paces itself by the server's rate-limit headers. */
export function cooperativeFetch(opts?: CooperativeFetchOptions): typeof fetch & { pacer: Pacer };

export const headers: {
  rateHeaders(d: Decision, window?: number | null): [string, string][];
  retryAfter(d: Decision): string | null;
  parseLimits(get: (name: string) => string | null, now?: number): Array<{ name: string; partition: string; quota: number | null; window: number | null; remaining: number | null; reset: number | null }>;
  parseRetryAfter(v: string | null, now?: number): number | null;
};
export function isTransient(err: unknown): boolean;
