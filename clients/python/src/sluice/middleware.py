"""WSGI and ASGI middleware: ask sluice once per request, set the
rate-limit headers (SPEC §10) and answer 429 with Retry-After when refused.

What is limited, one of:

- ``path="demo/api"``: ``RL.ACQUIRE demo/api KEY <subject>``, the subject
  ``key(request)`` (default: the client's IP address);
- ``limit=dict(rate=100, per="minute", burst=20)``: ``RL.ACQUIRE <key>
  RATE …`` with ``key(request)`` (default: ``"ip:" + client IP``).

``key`` gets the WSGI environ or the ASGI scope and may return None: the
request goes ahead with no decision. ``cost`` is a number or a function of
the request. Decisions by the failure policy: ``fail_open`` lets the
request through without headers; ``fail_closed`` answers 503 (as
httplimit's ``FailOpen(false)``); ``fallback`` and ``cache`` are answered
like the server's. ``window`` (seconds) is written in RateLimit-Policy;
for an inline limit it is ``per``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ._core import Decision, seconds
from .headers import PROBLEM_503, problem_429, rate_headers, retry_after

_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def _window(limit: Optional[dict], window: Any) -> Optional[float]:
    if window is not None:
        return seconds(window, "window")
    if limit is None:
        return None
    per = limit.get("per", 1)
    if isinstance(per, str):
        if per in _UNITS:
            return float(_UNITS[per])
        for suffix, mult in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)):
            if per.endswith(suffix) and per[: -len(suffix)].replace(".", "", 1).isdigit():
                return float(per[: -len(suffix)]) * mult
        return None
    return seconds(per, "per")


class _Limiter:
    def __init__(self, client: Any, path: Optional[str], limit: Optional[dict], key: Optional[Callable],
                 cost: Union[int, Callable, None], window: Any, headers: bool, ip: Callable[[Any], str]):
        if (path is None) == (limit is None):
            raise ValueError("give either path (budget tree) or limit (inline)")
        self.client, self.path, self.limit, self.cost = client, path, limit, cost
        self.key = key or ((lambda r: ip(r)) if path is not None else (lambda r: "ip:" + ip(r)))
        self.window = _window(limit, window)
        self.headers = headers

    def call(self, req: Any) -> Any:
        """The client's call for req (a coroutine for an AsyncClient), or None."""
        k = self.key(req)
        if k is None:
            return None
        cost = self.cost(req) if callable(self.cost) else self.cost
        if self.path is not None:
            return self.client.acquire_budget(self.path, key=k or None, cost=cost)
        return self.client.acquire(k, cost=cost, **self.limit)

    def respond(self, d: Optional[Decision]) -> tuple:
        """(status or None to go ahead, headers, body)."""
        if d is None or d.source == "fail_open":
            return None, [], b""
        if d.source == "fail_closed":
            return 503, [("Content-Type", "application/problem+json")], PROBLEM_503
        hs = rate_headers(d, self.window) if self.headers else []
        if d.allowed:
            return None, hs, b""
        hs = [("Content-Type", "application/problem+json")] + hs
        ra = retry_after(d)
        if ra is not None:
            hs.append(("Retry-After", ra))
        return 429, hs, problem_429(d)


_REASON = {429: "429 Too Many Requests", 503: "503 Service Unavailable"}


class WSGIMiddleware:
    """Limits a WSGI app with a :class:`sluice.Client`. The decision is in
    ``environ["sluice.decision"]``."""

    def __init__(self, app: Callable, client: Any, *, path: Optional[str] = None, limit: Optional[dict] = None,
                 key: Optional[Callable[[dict], Optional[str]]] = None, cost: Union[int, Callable, None] = None,
                 window: Any = None, headers: bool = True):
        self.app = app
        self.lim = _Limiter(client, path, limit, key, cost, window, headers,
                            lambda env: env.get("REMOTE_ADDR", ""))

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        d = self.lim.call(environ)
        status, hs, body = self.lim.respond(d)
        if status is not None:
            start_response(_REASON[status], hs + [("Content-Length", str(len(body)))])
            return [body]
        environ["sluice.decision"] = d

        def start(st: str, headers: list, exc_info: Any = None) -> Any:
            return start_response(st, list(headers) + hs, exc_info) if exc_info else start_response(st, list(headers) + hs)

        return self.app(environ, start)


class ASGIMiddleware:
    """Limits an ASGI app (HTTP requests; other scopes pass) with a
    :class:`sluice.AsyncClient`. The decision is in
    ``scope["state"]["sluice.decision"]`` where the server gives a state."""

    def __init__(self, app: Callable, client: Any, *, path: Optional[str] = None, limit: Optional[dict] = None,
                 key: Optional[Callable[[dict], Optional[str]]] = None, cost: Union[int, Callable, None] = None,
                 window: Any = None, headers: bool = True):
        self.app = app
        self.lim = _Limiter(client, path, limit, key, cost, window, headers,
                            lambda scope: (scope.get("client") or ("",))[0])

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        c = self.lim.call(scope)
        d = await c if c is not None else None
        status, hs, body = self.lim.respond(d)
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in hs]
        if status is not None:
            await send({"type": "http.response.start", "status": status,
                        "headers": raw + [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        if isinstance(scope.get("state"), dict):
            scope["state"]["sluice.decision"] = d

        async def send_with_headers(msg: dict) -> None:
            if msg["type"] == "http.response.start" and raw:
                msg = dict(msg, headers=list(msg.get("headers", [])) + raw)
            await send(msg)

        await self.app(scope, receive, send_with_headers)
