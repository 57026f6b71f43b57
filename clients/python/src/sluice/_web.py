"""What every HTTP adapter shares: one rule (a limit or a budget path, a
key, a cost, a skip predicate) asked once per request, and the answer it
turns into (go ahead with headers, 429, or 503), each refusal with
Retry-After."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple, Union

from ._core import Algo, Decision, seconds
from .headers import PROBLEM_503, problem_429, rate_headers, retry_after
from .rate import Limit, LimitLike, as_limit

Header = Tuple[str, str]
PROBLEM = ("Content-Type", "application/problem+json")


@dataclass
class Outcome:
    """What a request gets: ``status`` None goes ahead (with ``headers``
    added to its response); 429 or 503 is answered with ``headers`` and
    ``body`` instead. ``decision`` is None when nothing was asked (the
    key or skip said so)."""

    status: Optional[int]
    headers: List[Header] = field(default_factory=list)
    body: bytes = b""
    decision: Optional[Decision] = None

    @property
    def refused(self) -> bool:
        return self.status is not None

    def detail(self) -> str:
        d = self.decision
        if self.status == 503:
            return "rate limiting is unavailable; try again later"
        if d is None:
            return ""
        if d.retry_after < 0:
            return f"rate limit exceeded at {d.limited_by}; the request can never be admitted"
        return f"rate limit exceeded at {d.limited_by}; retry in {retry_after(d)} s"


class Rule:
    """One limit applied to requests. Exactly one of ``limit`` (a string
    such as "10/minute", a :class:`sluice.rate.Limit`, or a dict of
    ``acquire``'s rate/per/burst/algo) and ``path`` (a budget, whose
    subject is the key). ``key(request)`` names who is limited (None: the
    request goes ahead undecided); inline keys are prefixed with
    ``scope``. ``skip(request)`` true: the request goes ahead, nothing
    asked. ``cost`` is a number or a function of the request. ``window``
    (seconds) is RateLimit-Policy's ``w``; for an inline limit it is the
    limit's period."""

    def __init__(self, *, limit: Optional[LimitLike] = None, path: Optional[str] = None,
                 key: Callable[[Any], Any], cost: Union[int, Callable[[Any], int], None] = None,
                 skip: Optional[Callable[[Any], Any]] = None, window: Any = None, headers: bool = True,
                 algo: Optional[Algo] = None, scope: Union[str, Callable[[Any], str]] = "",
                 name: str = "limit"):
        if (path is None) == (limit is None):
            raise ValueError('give either limit (an inline limit such as "10/minute") or path (a budget)')
        if key is None or not callable(key):
            raise TypeError(f"key must be a function of the request, not {key!r}")
        if skip is not None and not callable(skip):
            raise TypeError(f"skip must be a function of the request returning true to skip, not {skip!r}")
        if cost is not None and not callable(cost) and (not isinstance(cost, int) or isinstance(cost, bool)):
            raise TypeError(f"cost must be a whole number or a function of the request, not {cost!r}")
        self.path = path
        self.limit: Optional[Limit] = as_limit(limit, algo, name=name) if limit is not None else None
        self.key, self.cost, self.skip, self.headers, self.scope = key, cost, skip, headers, scope
        if window is not None:
            self.window: Optional[float] = seconds(window, "window")
        else:
            self.window = self.limit.window if self.limit is not None and self.limit.window else None

    def call(self, client: Any, req: Any) -> Any:
        """The client's decision for req (sync client), or None when skipped."""
        if self.skip is not None and self.skip(req):
            return None
        k = self.key(req)
        if k is None:
            return None
        return self._ask(client, self._scoped(req, k), self.cost(req) if callable(self.cost) else self.cost)

    def _scoped(self, req: Any, k: Any) -> str:
        """The key asked: an inline limit's key after its scope (a route's
        name, say), a budget's subject as it is."""
        if self.path is not None:
            return str(k)
        sc = self.scope(req) if callable(self.scope) else self.scope
        return f"{sc}{k}"

    async def acall(self, client: Any, req: Any) -> Optional[Decision]:
        """The same for an AsyncClient; key, skip and cost may be coroutines."""
        if self.skip is not None:
            s = self.skip(req)
            if inspect.isawaitable(s):
                s = await s
            if s:
                return None
        k = self.key(req)
        if inspect.isawaitable(k):
            k = await k
        if k is None:
            return None
        cost = self.cost(req) if callable(self.cost) else self.cost
        if inspect.isawaitable(cost):
            cost = await cost
        return await self._ask(client, self._scoped(req, k), cost)

    def _ask(self, client: Any, k: str, cost: Any) -> Any:
        if self.path is not None:
            return client.acquire_budget(self.path, key=k or None, cost=cost)
        assert self.limit is not None
        return client.acquire(k, cost=cost, **self.limit.kwargs())

    def respond(self, d: Optional[Decision], client: Any = None) -> Outcome:
        return respond(d, self.window if self.headers else None, self.headers, client)


def unavailable_retry_after(client: Any) -> str:
    """Retry-After of a fail-closed 503: when the client's circuit breaker
    next lets a call through (its cooldown), at least 1 s."""
    cooldown = 1.0
    policy = getattr(client, "policy", None)
    if policy is not None:
        cooldown = policy.breaker.cooldown
    return str(max(1, math.ceil(cooldown)))


def respond(d: Optional[Decision], window: Optional[float], headers: bool = True, client: Any = None) -> Outcome:
    """The outcome of a decision: fail_open (or none) goes ahead without
    headers; fail_closed is 503 with Retry-After; a refusal 429 with
    Retry-After (left out only when the call can never be admitted), the
    rate-limit headers and problem+json; an admission goes ahead with the
    headers."""
    if d is None or d.source == "fail_open":
        return Outcome(None, [], b"", d)
    if d.source == "fail_closed":
        return Outcome(503, [PROBLEM, ("Retry-After", unavailable_retry_after(client))], PROBLEM_503, d)
    hs = rate_headers(d, window) if headers else []
    if d.allowed:
        return Outcome(None, hs, b"", d)
    hs = [PROBLEM] + hs
    ra = retry_after(d)
    if ra is not None:
        hs.append(("Retry-After", ra))
    return Outcome(429, hs, problem_429(d), d)


def remote_addr_wsgi(environ: dict) -> str:
    return environ.get("REMOTE_ADDR", "")


def remote_addr_asgi(scope: dict) -> str:
    return (scope.get("client") or ("",))[0]


def is_async(client: Any) -> bool:
    """Whether client's calls are coroutines (a sluice.AsyncClient)."""
    from .aio import AsyncClient
    return isinstance(client, AsyncClient) or inspect.iscoroutinefunction(getattr(client, "acquire", None)) \
        or inspect.iscoroutinefunction(getattr(client, "_decide", None))


def need_async(client: Any, where: str) -> None:
    if client is None or not hasattr(client, "acquire") or not is_async(client):
        raise TypeError(f"{where} needs a sluice.AsyncClient (an ASGI app must not block its loop), "
                        f"not {client!r}")


def need_sync(client: Any, where: str) -> None:
    if client is None or not hasattr(client, "acquire") or is_async(client):
        raise TypeError(f"{where} needs a sluice.Client (WSGI is synchronous), not {client!r}")
