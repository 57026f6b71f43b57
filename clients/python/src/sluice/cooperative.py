"""The cooperative client: follow the rate-limit headers of the API you
call, so that it never has to refuse you.

:class:`Pacer` keeps, per host and policy (and partition), what the last
response said: ``r`` requests remain until ``t`` seconds from then. Before
each request it waits for a slot. With a policy (``q`` requests per ``w``
seconds, from ``RateLimit-Policy``) it keeps a token bucket of ``q``
refilled at ``q / w``, set to ``r`` at each answer: sends go while a
token is left, then one every ``w / q`` s. Without one it spreads the
remaining requests evenly over the time to reset (one every
``t / (r + 1)`` s) and waits for the reset when none remains. After a 429
or 503 with ``Retry-After`` it waits that long plus up to ``jitter`` of
it. A wait longer than ``max_wait``
raises :class:`RateLimited` at once instead (``max_wait=0``: fail fast).

:class:`CooperativeAdapter` (requests) and :class:`CooperativeTransport` /
:class:`AsyncCooperativeTransport` (httpx) put a Pacer in front of every
request.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from .headers import parse_limits, parse_retry_after


class RateLimited(Exception):
    """The request was not sent: the API's limit would refuse it for
    ``retry_after`` more seconds than the caller agreed to wait."""

    def __init__(self, host: str, retry_after: float):
        super().__init__(f"rate limited by {host}: next request allowed in {retry_after:.3f} s")
        self.host = host
        self.retry_after = retry_after


class _State:
    """One policy of one host: with a policy (q per w seconds) a token
    bucket refilled at q/w and set to what the server says remains; without
    one, the remaining requests spread over the time to reset."""

    __slots__ = ("tokens", "stamp", "rate", "cap", "reset_at", "interval", "next_at")

    def __init__(self) -> None:
        self.tokens: Optional[float] = None  # requests left, as last heard, less those sent since
        self.stamp = 0.0  # when tokens was right
        self.rate: Optional[float] = None  # q / w, when the policy is known
        self.cap = 0.0  # q
        self.reset_at = 0.0  # when the policy is full again
        self.interval = 0.0  # without a policy: time to reset spread over what remains
        self.next_at = 0.0  # without a policy: no request before this instant

    def _refill(self, now: float) -> None:
        if self.tokens is None:
            return
        if self.rate:
            self.tokens = min(self.cap, self.tokens + (now - self.stamp) * self.rate)
        elif now >= self.reset_at:
            self.tokens = None  # reset passed: unknown until the next answer
        self.stamp = now

    def wait(self, now: float) -> float:
        self._refill(now)
        if self.tokens is None or self.tokens >= 1:
            return 0.0 if self.rate else max(0.0, self.next_at - now)
        if self.rate:
            return (1 - self.tokens) / self.rate
        return max(0.0, self.reset_at - now)

    def take(self, now: float) -> None:
        self._refill(now)
        if self.tokens is not None:
            self.tokens -= 1
        self.next_at = now + self.interval

    def learn(self, now: float, remaining: float, reset: Optional[float], quota: Optional[float],
              window: Optional[float]) -> None:
        if quota and window and self.rate == quota / window and self.tokens is not None:
            self._refill(now)
            # The projection keeps the fraction of a token the server's whole
            # count drops; it never runs ahead of the server, having started
            # from a count that did not, so keep it while the two agree.
            if math.floor(self.tokens) != remaining:
                self.tokens = remaining
        else:
            self.tokens = remaining
        self.stamp = now
        t = reset if reset is not None else (window or 0.0)
        self.reset_at = now + t
        if quota and window:
            self.rate, self.cap = quota / window, quota
        else:
            self.rate = None
            self.interval = t / (remaining + 1) if t > 0 else 0.0
            self.next_at = now + self.interval if remaining >= 1 else self.reset_at


class Pacer:
    """Per host and policy, when the next request may go. Thread-safe; one
    Pacer may serve many sessions or clients that share the API's limit."""

    def __init__(self, max_wait: float = 30.0, jitter: float = 0.1,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.max_wait, self.jitter, self.clock, self.sleep = max_wait, jitter, clock, sleep
        self._lock = threading.Lock()
        self._hosts: Dict[str, Dict[Tuple[str, str], _State]] = {}
        self._blocked: Dict[str, float] = {}
        self._inflight: Dict[str, int] = {}

    def _wait(self, host: str, now: float) -> float:
        w = max(0.0, self._blocked.get(host, 0.0) - now)
        for s in self._hosts.get(host, {}).values():
            w = max(w, s.wait(now))
        return w

    def reserve(self, host: str, max_wait: Optional[float] = None) -> float:
        """How long to wait before sending to host, the slot taken; raises
        RateLimited if that is longer than max_wait. Callers that can sleep
        call :meth:`acquire` instead."""
        limit = self.max_wait if max_wait is None else max_wait
        with self._lock:
            now = self.clock()
            w = self._wait(host, now)
            if w > limit:
                raise RateLimited(host, w)
            if w == 0:
                for s in self._hosts.get(host, {}).values():
                    s.take(now)
                self._inflight[host] = self._inflight.get(host, 0) + 1
            return w

    def acquire(self, host: str, max_wait: Optional[float] = None) -> None:
        """Blocks until a request to host may go (or raises RateLimited)."""
        deadline = self.clock() + (self.max_wait if max_wait is None else max_wait)
        while True:
            w = self.reserve(host, max(0.0, deadline - self.clock()))
            if w == 0:
                return
            self.sleep(w)

    async def acquire_async(self, host: str, max_wait: Optional[float] = None) -> None:
        deadline = self.clock() + (self.max_wait if max_wait is None else max_wait)
        while True:
            w = self.reserve(host, max(0.0, deadline - self.clock()))
            if w == 0:
                return
            await asyncio.sleep(w)

    def update(self, host: str, status: Optional[int], headers: Optional[Mapping[str, str]]) -> None:
        """Learns from a response (status None, headers None: the request
        failed without one)."""
        with self._lock:
            now = self.clock()
            inflight = self._inflight.get(host, 1) - 1
            self._inflight[host] = max(0, inflight)
            if headers is None:
                return
            pols = self._hosts.setdefault(host, {})
            for lim in parse_limits(headers):
                s = pols.setdefault((lim.name, lim.partition), _State())
                if lim.remaining is None:
                    continue
                # Others in flight may already have spent some of it.
                s.learn(now, max(0.0, lim.remaining - inflight), lim.reset, lim.quota, lim.window)
            if status in (429, 503):
                ra = parse_retry_after(headers.get("Retry-After") or headers.get("retry-after"))
                if ra is None and status == 429:
                    ra = 1.0
                if ra is not None:
                    ra *= 1 + random.random() * self.jitter
                    self._blocked[host] = max(self._blocked.get(host, 0.0), now + ra)


def host_of(url: str) -> str:
    u = urlsplit(str(url))
    return (u.netloc or u.path).lower()


try:
    import requests.adapters

    class CooperativeAdapter(requests.adapters.HTTPAdapter):
        """A requests adapter that paces requests by the server's rate-limit
        headers: ``session.mount("https://api.example.com/", CooperativeAdapter())``.
        ``max_wait`` (seconds) bounds the wait before a request; beyond it the
        request is not sent and :class:`RateLimited` raised (0: fail fast)."""

        def __init__(self, *args: Any, max_wait: float = 30.0, pacer: Optional[Pacer] = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.pacer = pacer or Pacer(max_wait=max_wait)
            self.max_wait = max_wait

        def send(self, request: Any, **kwargs: Any) -> Any:
            host = host_of(request.url)
            self.pacer.acquire(host, self.max_wait)
            try:
                resp = super().send(request, **kwargs)
            except BaseException:
                self.pacer.update(host, None, None)
                raise
            self.pacer.update(host, resp.status_code, resp.headers)
            return resp
except ImportError:  # requests is optional
    pass


try:
    import httpx

    class CooperativeTransport(httpx.BaseTransport):
        """An httpx transport that paces requests by the server's rate-limit
        headers: ``httpx.Client(transport=CooperativeTransport())``. Wraps
        ``transport`` (default ``httpx.HTTPTransport()``)."""

        def __init__(self, transport: Optional[httpx.BaseTransport] = None, *, max_wait: float = 30.0,
                     pacer: Optional[Pacer] = None):
            self.transport = transport or httpx.HTTPTransport()
            self.pacer = pacer or Pacer(max_wait=max_wait)
            self.max_wait = max_wait

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            host = request.url.netloc.decode() if isinstance(request.url.netloc, bytes) else str(request.url.netloc)
            self.pacer.acquire(host.lower(), self.max_wait)
            try:
                resp = self.transport.handle_request(request)
            except BaseException:
                self.pacer.update(host.lower(), None, None)
                raise
            self.pacer.update(host.lower(), resp.status_code, resp.headers)
            return resp

        def close(self) -> None:
            self.transport.close()

    class AsyncCooperativeTransport(httpx.AsyncBaseTransport):
        """:class:`CooperativeTransport` for ``httpx.AsyncClient``."""

        def __init__(self, transport: Optional[httpx.AsyncBaseTransport] = None, *, max_wait: float = 30.0,
                     pacer: Optional[Pacer] = None):
            self.transport = transport or httpx.AsyncHTTPTransport()
            self.pacer = pacer or Pacer(max_wait=max_wait)
            self.max_wait = max_wait

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            host = request.url.netloc.decode() if isinstance(request.url.netloc, bytes) else str(request.url.netloc)
            await self.pacer.acquire_async(host.lower(), self.max_wait)
            try:
                resp = await self.transport.handle_async_request(request)
            except BaseException:
                self.pacer.update(host.lower(), None, None)
                raise
            self.pacer.update(host.lower(), resp.status_code, resp.headers)
            return resp

        async def aclose(self) -> None:
            await self.transport.aclose()
except ImportError:  # httpx is optional
    pass
