"""What the sync and asyncio clients share: decisions, the failure policy,
the circuit breaker, the denial cache and the building of commands."""

from __future__ import annotations

import datetime
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Union

import redis.exceptions


# The algorithms ALGO names (docs/algorithms.md); archtest's drift test
# holds this list to the server's registry.
Algo = Literal["token_bucket", "gcra", "sliding_window", "fixed_window", "leaky_bucket"]


#: Error replies that mean "sluice cannot decide now", not "your call is wrong".
TRANSIENT_REPLIES = ("LOADING", "TRYAGAIN", "CLUSTERDOWN")

SOURCES = ("server", "cache", "fallback", "fail_open", "fail_closed")


# Error codes sluice sends besides ERR; redis-py strips "ERR " from the
# others, which reply_line puts back.
CODES = ("NOBUDGET", "NORESERVATION", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "NOAUTH", "NOPERM", "WRONGPASS", "NOPROTO",
         "DENIED", "NOSUCH", "NOLOOP", "EXECABORT", "READONLY", "NOSCRIPT", "WRONGTYPE", "MOVED", "ASK")


def reply_line(err: BaseException) -> str:
    """The error reply as sluice sent it."""
    msg = str(err)
    first = msg.split(" ", 1)[0]
    if type(err) is redis.exceptions.ResponseError and first not in CODES:
        return "ERR " + msg
    return msg


class SluiceError(Exception):
    """An error reply that the failure policy does not cover (ERR, NOBUDGET,
    NOAUTH, NOPERM …): a bug in the call or the configuration. ``reply`` is
    the reply line; ``code`` its first word."""

    def __init__(self, reply: str):
        super().__init__(reply)
        self.reply = reply
        self.code = reply.split(" ", 1)[0] if reply else ""


class NoReservation(SluiceError):
    """sluice's NORESERVATION reply to settle: the reservation is not open
    (unknown, already settled, released or expired, or issued by a node that
    is not a member of the cluster)."""


def error_reply(reply: str) -> SluiceError:
    """The exception for an error reply line."""
    return NoReservation(reply) if reply.startswith("NORESERVATION") else SluiceError(reply)


class Unavailable(Exception):
    """sluice could not be asked (connection, deadline, LOADING, TRYAGAIN,
    CLUSTERDOWN, or the circuit breaker is open); raised only by calls that
    have no failure policy (refund, settle, release, renew)."""


class CircuitOpen(Unavailable):
    """The circuit breaker is open: no call goes out until its cooldown ends."""


@dataclass(frozen=True)
class Decision:
    """One answer to "may this go ahead?".

    ``retry_after`` and ``reset_after`` are milliseconds; ``retry_after`` is
    -1 when the call can never be admitted. ``remaining`` and ``limit`` are -1
    when nothing limits (an open failure policy). ``source`` says who decided:
    ``server``, ``cache`` (a denial remembered until its retry_after),
    ``fallback`` (the local fallback limit), ``fail_open`` or ``fail_closed``.
    ``error`` is what made the policy decide, when it did."""

    allowed: bool
    remaining: int
    limit: int
    retry_after: int
    reset_after: int
    limited_by: str
    source: str = "server"
    degraded: bool = False
    error: Optional[BaseException] = field(default=None, compare=False, repr=False)

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True)
class Reservation(Decision):
    """RL.RESERVE's answer: the decision, and ``id``, the reservation to settle,
    release or renew. ``id`` is None when nothing is held on the server: the
    reservation was refused, let through over a ``degrade`` limit
    (``degraded``), or decided by the failure policy (``source`` is
    ``fail_open``, ``fail_closed`` or ``fallback``). Settling, releasing or
    renewing a reservation without an id sends nothing."""

    id: Optional[str] = None


@dataclass(frozen=True)
class Fallback:
    """A local token bucket per key, used while sluice cannot answer: ``rate``
    tokens every ``per`` seconds, holding at most ``burst`` (default ``rate``)."""

    rate: float
    per: float = 1.0
    burst: Optional[float] = None


Failure = Union[str, Fallback]  # "open", "closed" or Fallback(...)


def seconds(v: Any, name: str) -> float:
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    raise TypeError(f"{name} must be seconds (a number) or a timedelta, not {v!r}")


def per_arg(per: Any) -> str:
    """PER as sluice takes it: a unit name as given, or seconds (a number or
    a timedelta) as whole milliseconds."""
    if isinstance(per, str):
        return per
    ms = seconds(per, "per") * 1000
    if ms < 1 or ms != int(ms):
        raise ValueError(f"per must be a whole number of milliseconds, at least 1 ms; got {per!r}")
    return f"{int(ms)}ms"


def inline_args(rate, per, burst, algo) -> list:
    if rate is None:
        raise TypeError("rate is required for an inline limit")
    args: list = ["RATE", rate]
    if per is not None:
        args += ["PER", per_arg(per)]
    if burst is not None:
        args += ["BURST", burst]
    if algo is not None:
        args += ["ALGO", algo]
    return args


def text(v: Any) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)


def decision(reply: Any) -> Decision:
    if not isinstance(reply, (list, tuple)) or len(reply) != 6:
        raise SluiceError(f"ERR unexpected reply {reply!r}")
    a, rem, lim, retry, reset, by = reply
    return Decision(allowed=int(a) != 0, remaining=int(rem), limit=int(lim), retry_after=int(retry),
                    reset_after=int(reset), limited_by=text(by), degraded=int(a) == 2)


def reservation(reply: Any) -> Reservation:
    if not isinstance(reply, (list, tuple)) or len(reply) != 7:
        raise SluiceError(f"ERR unexpected reply {reply!r}")
    d = decision(reply[:6])
    return Reservation(d.allowed, d.remaining, d.limit, d.retry_after, d.reset_after, d.limited_by,
                       degraded=d.degraded, id=text(reply[6]) or None)


def local_reservation(d: Decision) -> Reservation:
    """A failure policy's decision as a reservation that holds nothing."""
    return Reservation(d.allowed, d.remaining, d.limit, d.retry_after, d.reset_after, d.limited_by,
                       d.source, d.degraded, d.error)


def flag(reply: Any) -> bool:
    """RL.RELEASE's and RL.RENEW's :1 or :0."""
    return int(reply) == 1


def milliseconds(v: Any, name: str) -> int:
    """A positive duration in seconds (or a timedelta) as whole milliseconds,
    rounded up."""
    s = seconds(v, name)
    if s <= 0:
        raise ValueError(f"{name} must be above 0 seconds, got {v!r}")
    return math.ceil(s * 1000)


def reservation_id(r: Any) -> Optional[str]:
    """The id of a Reservation, or an id as given; None when there is none."""
    if isinstance(r, Reservation):
        return r.id
    if r is None or isinstance(r, (str, bytes, bytearray)):
        return text(r) if r else None
    raise TypeError(f"expected a Reservation or a reservation id, not {r!r}")


def throttle_decision(key: str, reply: Any) -> Decision:
    """CL.THROTTLE's seconds as a Decision's milliseconds."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 5:
        raise SluiceError(f"ERR unexpected reply {reply!r}")
    limited, lim, rem, retry_s, reset_s = (int(x) for x in reply)
    return Decision(allowed=limited == 0, remaining=rem, limit=lim,
                    retry_after=0 if limited == 0 else (retry_s * 1000 if retry_s >= 0 else -1),
                    reset_after=reset_s * 1000, limited_by=key)


def is_transient(err: BaseException) -> bool:
    """Whether err means sluice could not decide (the failure policy applies)
    rather than that it refused the call."""
    if isinstance(err, (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)):
        return False
    if isinstance(err, redis.exceptions.ResponseError):
        return str(err).startswith(TRANSIENT_REPLIES) or isinstance(err, redis.exceptions.BusyLoadingError)
    return isinstance(err, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError))


class Breaker:
    """Opens after ``failures`` consecutive failures for ``cooldown`` seconds;
    then lets one probe through (half-open); a success closes it."""

    def __init__(self, failures: int, cooldown: float, clock: Callable[[], float]):
        if failures < 1:
            raise ValueError("breaker_failures must be at least 1")
        self.failures, self.cooldown, self.clock = failures, cooldown, clock
        self._lock = threading.Lock()
        self._count = 0
        self._open_until: Optional[float] = None
        self._probing = False

    @property
    def state(self) -> str:
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "half_open" if self._probing or self.clock() >= self._open_until else "open"

    def allow(self) -> bool:
        with self._lock:
            if self._open_until is None:
                return True
            if self._probing or self.clock() < self._open_until:
                return False
            self._probing = True
            return True

    def success(self) -> None:
        with self._lock:
            self._count, self._open_until, self._probing = 0, None, False

    def failure(self) -> None:
        with self._lock:
            self._count += 1
            if self._probing or self._count >= self.failures:
                self._open_until = self.clock() + self.cooldown
            self._probing = False


class DenialCache:
    """Refusals by (key, limit), answered from memory until their retry_after;
    least recently used entries go first once ``size`` are held."""

    def __init__(self, size: int, clock: Callable[[], float]):
        self.size, self.clock = size, clock
        self._lock = threading.Lock()
        self._m: "OrderedDict[Any, tuple]" = OrderedDict()

    def get(self, k: Any, cost: int) -> Optional[Decision]:
        if self.size <= 0:
            return None
        now = self.clock()
        with self._lock:
            e = self._m.get(k)
            if e is None:
                return None
            until, denied_cost, d, at = e
            if now >= until:
                del self._m[k]
                return None
            if cost < denied_cost:  # a smaller call may fit sooner
                return None
            self._m.move_to_end(k)
        gone = int((now - at) * 1000)
        return Decision(False, d.remaining, d.limit, max(1, math.ceil((until - now) * 1000)),
                        max(0, d.reset_after - gone), d.limited_by, source="cache")

    def put(self, k: Any, cost: int, d: Decision) -> None:
        if self.size <= 0 or d.allowed or d.retry_after <= 0:
            return
        now = self.clock()
        with self._lock:
            self._m[k] = (now + d.retry_after / 1000, cost, d, now)
            self._m.move_to_end(k)
            while len(self._m) > self.size:
                self._m.popitem(last=False)

    def forget(self, key: Any) -> None:
        """Drops every denial of key (after a refund or reset)."""
        with self._lock:
            for k in [k for k in self._m if k[1] == key]:
                del self._m[k]

    def __len__(self) -> int:
        return len(self._m)


class LocalBuckets:
    """The fallback limit: a token bucket per key, the least recently used
    dropped beyond ``size``."""

    def __init__(self, fb: Fallback, size: int, clock: Callable[[], float]):
        self.rate = fb.rate / fb.per
        self.burst = float(fb.burst if fb.burst is not None else fb.rate)
        self.size, self.clock = max(size, 1), clock
        self._lock = threading.Lock()
        self._m: "OrderedDict[Any, list]" = OrderedDict()

    def take(self, key: Any, cost: int) -> Decision:
        now = self.clock()
        with self._lock:
            b = self._m.get(key)
            if b is None:
                b = self._m[key] = [self.burst, now]
            self._m.move_to_end(key)
            while len(self._m) > self.size:
                self._m.popitem(last=False)
            b[0] = min(self.burst, b[0] + (now - b[1]) * self.rate)
            b[1] = now
            ok = b[0] >= cost
            if ok:
                b[0] -= cost
            tokens = b[0]
        lim = int(self.burst)
        if cost > self.burst:
            retry = -1
        elif ok:
            retry = 0
        else:
            retry = math.ceil((cost - tokens) / self.rate * 1000)
        reset = math.ceil((self.burst - tokens) / self.rate * 1000)
        return Decision(ok, int(tokens), lim, retry, reset, str(key), source="fallback")


class Policy:
    """The failure policy, the breaker and the denial cache of one client."""

    def __init__(self, failure: Failure, breaker_failures: int, breaker_cooldown: Any,
                 denial_cache_size: int, clock: Callable[[], float]):
        if not (failure in ("open", "closed") or isinstance(failure, Fallback)):
            raise ValueError(f'failure must be "open", "closed" or a Fallback, not {failure!r}')
        self.failure = failure
        self.breaker = Breaker(breaker_failures, seconds(breaker_cooldown, "breaker_cooldown"), clock)
        self.denials = DenialCache(denial_cache_size, clock)
        self.local = LocalBuckets(failure, denial_cache_size, clock) if isinstance(failure, Fallback) else None
        self._open = None if self.local is not None else self.decide("", 0, CircuitOpen("circuit breaker open"))

    def fast(self) -> Optional[Decision]:
        """The policy's decision while the breaker is open, without building
        the call, when it depends on nothing else (open or closed, and no
        denial cached); None otherwise. Lock-free: a dead sluice costs
        well under a microsecond a call."""
        b = self.breaker
        u = b._open_until
        if u is None or self._open is None or self.denials._m:
            return None
        if b._probing or b.clock() < u:
            return self._open
        return None

    def decide(self, key: Any, cost: int, err: BaseException) -> Decision:
        if self.local is not None:
            d = self.local.take(key, cost)
            return Decision(d.allowed, d.remaining, d.limit, d.retry_after, d.reset_after,
                            d.limited_by, "fallback", error=err)
        if self.failure == "open":
            return Decision(True, -1, -1, 0, 0, "", "fail_open", error=err)
        return Decision(False, -1, -1, 0, 0, "", "fail_closed", error=err)

    # The steps of one call, shared by the sync and asyncio clients.

    def before(self, c: "Call") -> Optional[Decision]:
        """A decision made without asking sluice (a cached denial, or the
        policy's while the breaker is open), or None: ask."""
        if c.cache_key is not None:
            d = self.denials.get(c.cache_key, c.cost)
            if d is not None:
                return d
        if not self.breaker.allow():
            return c.local(self.decide(c.key, c.cost, CircuitOpen("circuit breaker open")))
        return None

    def failed(self, c: "Call", e: BaseException) -> Decision:
        """The policy's decision when sluice could not decide; else raises
        (SluiceError for an error reply)."""
        if is_transient(e):
            self.breaker.failure()
            return c.local(self.decide(c.key, c.cost, e))
        self.breaker.success()
        if isinstance(e, redis.exceptions.ResponseError):
            raise error_reply(reply_line(e)) from None
        raise e

    def answered(self, c: "Call", reply: Any) -> Decision:
        self.breaker.success()
        d = c.convert(reply)
        if c.cache_key is not None:
            self.denials.put(c.cache_key, c.cost, d)
        return d

    def strict_before(self) -> None:
        if not self.breaker.allow():
            raise CircuitOpen("circuit breaker open")

    def strict_failed(self, e: BaseException) -> None:
        """Raises Unavailable or SluiceError (calls without a failure policy)."""
        if is_transient(e):
            self.breaker.failure()
            raise Unavailable(str(e)) from e
        self.breaker.success()
        if isinstance(e, redis.exceptions.ResponseError):
            raise error_reply(reply_line(e)) from None
        raise e


def same(d: Decision) -> Decision:
    return d


class Call:
    """One limiting call: the command, the cache key (None: not cached), the
    fallback key and cost, how to read the reply, and how to turn the
    failure policy's decision into the call's answer."""

    __slots__ = ("args", "cache_key", "key", "cost", "convert", "local")

    def __init__(self, args, cache_key, key, cost, convert=decision, local=same):
        self.args, self.cache_key, self.key, self.cost, self.convert = args, cache_key, key, cost, convert
        self.local = local


def acquire_call(cmd: str, key: str, rate, per, burst, algo, cost, wait, dryrun, cacheable: bool) -> Call:
    args = [cmd, key] + inline_args(rate, per, burst, algo)
    tail = []
    if cost is not None:
        tail += ["COST", cost]
    if wait is not None:
        tail += ["WAIT", max(0, math.ceil(seconds(wait, "wait") * 1000))]
    if dryrun:
        tail.append("DRYRUN")
    ck = ("inline", key, rate, per_arg(per) if per is not None else None, burst, algo) \
        if cacheable and wait is None and not dryrun else None
    return Call(args + tail, ck, key, 1 if cost is None else int(cost))


def budget_call(cmd: str, path: str, key, cost, wait, dryrun, cacheable: bool) -> Call:
    args = [cmd, path]
    if key is not None:
        args += ["KEY", key]
    if cost is not None:
        args += ["COST", cost]
    if wait is not None:
        args += ["WAIT", max(0, math.ceil(seconds(wait, "wait") * 1000))]
    if dryrun:
        args.append("DRYRUN")
    target = path if key is None else f"{path}#{key}"
    ck = ("budget", target) if cacheable and wait is None and not dryrun else None
    return Call(args, ck, target, 1 if cost is None else int(cost))


def reserve_call(target: str, estimate: int, key, rate, per, burst, algo, quota, quota_per, quota_tz,
                 concurrency, ttl, wait) -> Call:
    """RL.RESERVE target [RATE … | QUOTA … | CONCURRENCY n | KEY subject]
    COST estimate [TTL ms] [WAIT ms]; the server says what does not go
    together."""
    args: list = ["RL.RESERVE", target]
    for word, v in (("RATE", rate), ("PER", None if per is None else per_arg(per)), ("BURST", burst),
                    ("ALGO", algo), ("QUOTA", quota)):
        if v is not None:
            args += [word, v]
    if quota is None and (quota_per is not None or quota_tz is not None):
        raise TypeError("quota_per and quota_tz belong to quota")
    if quota_per is not None:
        args += ["PER", quota_per]
    if quota_tz is not None:
        args += ["TZ", quota_tz]
    if concurrency is not None:
        args += ["CONCURRENCY", concurrency]
    if key is not None:
        args += ["KEY", key]
    args += ["COST", estimate]
    if ttl is not None:
        args += ["TTL", milliseconds(ttl, "ttl")]
    if wait is not None:
        args += ["WAIT", max(0, math.ceil(seconds(wait, "wait") * 1000))]
    return Call(args, None, target if key is None else f"{target}#{key}", int(estimate), reservation,
                local_reservation)


def monotonic() -> float:
    return time.monotonic()


class Calls:
    """The limiting calls, for both clients: each builds its command and
    hands it to ``_decide`` (failure policy) or ``_strict`` (none), which the
    sync client runs and the asyncio client awaits."""

    policy: Policy

    def _decide(self, c: Call, wait: Any) -> Any:
        raise NotImplementedError

    def _strict(self, c: Call) -> Any:
        raise NotImplementedError

    def _done(self, d: Decision) -> Any:
        return d

    def acquire(self, key: str, rate: int, per: Any = None, burst: Optional[int] = None,
                algo: Optional[Algo] = None, cost: Optional[int] = None, wait: Any = None,
                dryrun: bool = False) -> Decision:
        """RL.ACQUIRE key RATE rate [PER per] [BURST burst] [ALGO algo] [COST cost]
        [WAIT ms] [DRYRUN]. ``per`` is a unit ("minute") or seconds; ``wait``
        seconds (the deadline grows by it)."""
        d = self.policy.fast()
        if d is not None:
            return self._done(d)
        return self._decide(acquire_call("RL.ACQUIRE", key, rate, per, burst, algo, cost, wait, dryrun, True),
                            wait)

    def acquire_budget(self, path: str, key: Optional[str] = None, cost: Optional[int] = None,
                       wait: Any = None, dryrun: bool = False) -> Decision:
        """RL.ACQUIRE path [KEY key] [COST cost] [WAIT ms] [DRYRUN]: the budget tree's limit."""
        d = self.policy.fast()
        if d is not None:
            return self._done(d)
        return self._decide(budget_call("RL.ACQUIRE", path, key, cost, wait, dryrun, True), wait)

    def peek(self, key: str, rate: int, per: Any = None, burst: Optional[int] = None,
             algo: Optional[Algo] = None, cost: Optional[int] = None) -> Decision:
        """RL.PEEK with an inline limit: the decision, nothing consumed."""
        return self._decide(acquire_call("RL.PEEK", key, rate, per, burst, algo, cost, None, False, False), None)

    def peek_budget(self, path: str, key: Optional[str] = None, cost: Optional[int] = None) -> Decision:
        """RL.PEEK on a budget path."""
        return self._decide(budget_call("RL.PEEK", path, key, cost, None, False, False), None)

    def refund(self, key: str, cost: int, rate: int, per: Any = None, burst: Optional[int] = None,
               algo: Optional[Algo] = None) -> Decision:
        """RL.REFUND: gives cost tokens back. No failure policy: raises
        :class:`Unavailable` when sluice cannot be asked."""
        c = acquire_call("RL.REFUND", key, rate, per, burst, algo, cost, None, False, False)
        self.policy.denials.forget(key)
        return self._strict(c)

    def refund_budget(self, path: str, cost: int, key: Optional[str] = None) -> Decision:
        """RL.REFUND on a budget path."""
        c = budget_call("RL.REFUND", path, key, cost, None, False, False)
        self.policy.denials.forget(c.key)
        return self._strict(c)

    def throttle(self, key: str, max_burst: int, count: int, period: Any, quantity: int = 1) -> Decision:
        """CL.THROTTLE key max_burst count period quantity, as a Decision
        (milliseconds, ``limit`` = max_burst + 1)."""
        p = seconds(period, "period")
        if p != int(p) or p < 1:
            raise ValueError(f"period must be whole seconds, at least 1; got {period!r}")
        c = Call(["CL.THROTTLE", key, max_burst, count, int(p), quantity],
                 ("throttle", key, max_burst, count, int(p)), key, int(quantity),
                 lambda r: throttle_decision(key, r))
        return self._decide(c, None)

    def reserve(self, target: str, estimate: int, *, key: Optional[str] = None, rate: Optional[int] = None,
                per: Any = None, burst: Optional[int] = None, algo: Optional[Algo] = None,
                quota: Optional[int] = None, quota_per: Optional[str] = None, quota_tz: Optional[str] = None,
                concurrency: Optional[int] = None, ttl: Any = None, wait: Any = None) -> Reservation:
        """RL.RESERVE: admits ``estimate`` tokens and holds them until
        :meth:`settle`, :meth:`release` or the TTL (``ttl`` seconds; the
        server's default is 60). Budget form: ``target`` is a path, ``key``
        its subject. Inline form: ``target`` is a key limited by ``rate``
        (with ``per``, ``burst``, ``algo`` as in :meth:`acquire`), ``quota``
        (per ``quota_per``, in ``quota_tz``) and/or ``concurrency``
        (reservations in flight). The failure policy decides when sluice
        cannot; its reservations hold nothing and have no id. Refusals are
        not cached: a release can free a concurrency slot at any moment."""
        return self._decide(reserve_call(target, estimate, key, rate, per, burst, algo, quota, quota_per,
                                         quota_tz, concurrency, ttl, wait), wait)

    def settle(self, reservation: Union[Reservation, str, None], actual: int) -> Optional[Decision]:
        """RL.SETTLE id ACTUAL actual: charges the real cost, giving back or
        charging the difference from the estimate (never refused); the
        decision describes the levels afterwards. A reservation without an
        id sends nothing and gets None. Raises :class:`NoReservation` when
        the reservation is not open, :class:`Unavailable` when sluice cannot
        be asked."""
        rid = reservation_id(reservation)
        if rid is None:
            return self._done(None)
        return self._strict(Call(["RL.SETTLE", rid, "ACTUAL", actual], None, rid, 0))

    def release(self, reservation: Union[Reservation, str, None]) -> bool:
        """RL.RELEASE id: the work did not happen, the whole estimate goes
        back. Whether the reservation was open (False, and nothing sent,
        without an id). Raises :class:`Unavailable` when sluice cannot be
        asked."""
        rid = reservation_id(reservation)
        if rid is None:
            return self._done(False)
        return self._strict(Call(["RL.RELEASE", rid], None, rid, 0, flag))

    def renew(self, reservation: Union[Reservation, str, None], ttl: Any) -> bool:
        """RL.RENEW id TTL ms: the reservation now expires ``ttl`` seconds
        from now. Whether it was open (False, and nothing sent, without an
        id). Raises :class:`Unavailable` when sluice cannot be asked."""
        ms = milliseconds(ttl, "ttl")
        rid = reservation_id(reservation)
        if rid is None:
            return self._done(False)
        return self._strict(Call(["RL.RENEW", rid, "TTL", ms], None, rid, 0, flag))

    # -- machinery ------------------------------------------------------



class Held:
    """What ``with client.reservation(...)`` yields: the :class:`Reservation`
    (``reservation``; its fields read through, ``r.allowed``, ``r.id`` …) and
    the calls that end it. ``ended`` is whether it was settled or released."""

    def __init__(self, client: Any, r: Reservation):
        self.client, self.reservation, self.ended = client, r, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reservation, name)

    def __bool__(self) -> bool:
        return self.reservation.allowed

    def __repr__(self) -> str:
        return f"Held({self.reservation!r}, ended={self.ended})"

    def settle(self, actual: int) -> Optional[Decision]:
        d = self.client.settle(self.reservation, actual)
        self.ended = True
        return d

    def release(self) -> bool:
        ok = self.client.release(self.reservation)
        self.ended = True
        return ok

    def renew(self, ttl: Any) -> bool:
        return self.client.renew(self.reservation, ttl)


class AsyncHeld(Held):
    """:class:`Held` for ``async with``: its calls are coroutines."""

    async def settle(self, actual: int) -> Optional[Decision]:  # type: ignore[override]
        d = await self.client.settle(self.reservation, actual)
        self.ended = True
        return d

    async def release(self) -> bool:  # type: ignore[override]
        ok = await self.client.release(self.reservation)
        self.ended = True
        return ok

    async def renew(self, ttl: Any) -> bool:  # type: ignore[override]
        return await self.client.renew(self.reservation, ttl)
