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

export interface ClientOptions {
  /** An ioredis or node-redis client; default: a new ioredis client on host/port with its offline queue and retries off. */
  redis?: unknown;
  host?: string;
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

export class Client {
  constructor(opts?: ClientOptions);
  readonly breaker: { readonly state: "closed" | "open" | "half_open" };
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

export interface MiddlewareOptions {
  client: Client;
  /** Budget path; key(req) gives the subject (default the client IP). */
  path?: string;
  /** Inline limit; key(req) gives the key (default "ip:" + client IP). */
  limit?: InlineLimit;
  key?: (req: any) => string | null | undefined;
  cost?: number | ((req: any) => number);
  /** Seconds, for RateLimit-Policy (an inline limit's per by default). */
  window?: number;
  headers?: boolean;
}
/** Express (or node:http) middleware: (req, res, next). */
export function express(opts: MiddlewareOptions): (req: any, res: any, next: (err?: any) => void) => void;

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
