"""WSGI and ASGI middleware: ask sluice once per request, set the
rate-limit headers (SPEC §10) and answer 429 with Retry-After when refused.

What is limited, one of:

- ``path="demo/api"``: ``RL.ACQUIRE demo/api KEY <subject>``, the subject
  ``key(request)`` (default: the client's IP address);
- ``limit="100/minute"`` (:mod:`sluice.rate`) or
  ``limit=dict(rate=100, per="minute", burst=20)``: ``RL.ACQUIRE <key>
  RATE …`` with ``key(request)`` (default: ``"ip:" + client IP``).

``key`` gets the WSGI environ or the ASGI scope and may return None: the
request goes ahead with no decision; ``skip`` returning true does the
same without calling ``key``. ``cost`` is a number or a function of the
request. Decisions by the failure policy: ``fail_open`` lets the request
through without headers; ``fail_closed`` answers 503 with Retry-After (the
circuit breaker's cooldown, at least 1 s; as httplimit's
``FailOpen(false)``); ``fallback`` and ``cache`` are answered like the
server's. ``window`` (seconds) is written in RateLimit-Policy; for an
inline limit it is ``per``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ._core import Algo, seconds
from ._web import Rule, remote_addr_asgi, remote_addr_wsgi
from .rate import LimitLike

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
        for suffix, mult in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400), ("w", 604800)):
            if per.endswith(suffix) and per[: -len(suffix)].replace(".", "", 1).isdigit():
                return float(per[: -len(suffix)]) * mult
        return None
    return seconds(per, "per")


class _Limiter(Rule):
    """A Rule whose key defaults to the client's IP address (the subject of
    a budget path; ``"ip:" + IP`` for an inline limit)."""

    def __init__(self, client: Any, path: Optional[str], limit: Optional[LimitLike], key: Optional[Callable],
                 cost: Union[int, Callable, None], window: Any, headers: bool, ip: Callable[[Any], str],
                 skip: Optional[Callable] = None, algo: Optional[Algo] = None):
        if key is None:
            key = (lambda r: ip(r)) if path is not None else (lambda r: "ip:" + ip(r))
        super().__init__(limit=limit, path=path, key=key, cost=cost, skip=skip, window=window, headers=headers,
                         algo=algo)
        self.client = client

    def decide(self, req: Any) -> Any:
        return self.call(self.client, req)


_REASON = {429: "429 Too Many Requests", 503: "503 Service Unavailable"}


class WSGIMiddleware:
    """Limits a WSGI app with a :class:`sluice.Client`. ``limit`` is a
    string ("100/minute", see :mod:`sluice.rate`) or a dict of
    ``acquire``'s arguments; ``skip(environ)`` true lets a request through
    unasked. The decision is in ``environ["sluice.decision"]``."""

    def __init__(self, app: Callable, client: Any, *, path: Optional[str] = None,
                 limit: Optional[LimitLike] = None, key: Optional[Callable[[dict], Optional[str]]] = None,
                 cost: Union[int, Callable, None] = None, window: Any = None, headers: bool = True,
                 skip: Optional[Callable[[dict], Any]] = None, algo: Optional[Algo] = None):
        self.app = app
        self.lim = _Limiter(client, path, limit, key, cost, window, headers, remote_addr_wsgi, skip, algo)

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        d = self.lim.decide(environ)
        out = self.lim.respond(d, self.lim.client)
        if out.status is not None:
            start_response(_REASON[out.status], out.headers + [("Content-Length", str(len(out.body)))])
            return [out.body]
        environ["sluice.decision"] = d
        hs = out.headers

        def start(st: str, headers: list, exc_info: Any = None) -> Any:
            have = {k.lower() for k, _ in headers}
            hs2 = list(headers) + [(k, v) for k, v in hs if k.lower() not in have]
            return start_response(st, hs2, exc_info) if exc_info else start_response(st, hs2)

        return self.app(environ, start)


def asgi_headers(hs: list) -> list:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in hs]


class ASGIMiddleware:
    """Limits an ASGI app (HTTP requests; other scopes pass) with a
    :class:`sluice.AsyncClient`; ``key``, ``skip`` and ``cost`` get the
    ASGI scope and may be coroutines. The decision is in
    ``scope["state"]["sluice.decision"]`` where the server gives a state."""

    def __init__(self, app: Callable, client: Any, *, path: Optional[str] = None,
                 limit: Optional[LimitLike] = None, key: Optional[Callable[[dict], Optional[str]]] = None,
                 cost: Union[int, Callable, None] = None, window: Any = None, headers: bool = True,
                 skip: Optional[Callable[[dict], Any]] = None, algo: Optional[Algo] = None):
        self.app = app
        self.lim = _Limiter(client, path, limit, key, cost, window, headers, remote_addr_asgi, skip, algo)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        d = await self.lim.acall(self.lim.client, self.request(scope, receive))
        out = self.lim.respond(d, self.lim.client)
        raw = asgi_headers(out.headers)
        if out.status is not None:
            await send({"type": "http.response.start", "status": out.status,
                        "headers": raw + [(b"content-length", str(len(out.body)).encode())]})
            await send({"type": "http.response.body", "body": out.body})
            return
        self.remember(scope, d)

        async def send_with_headers(msg: dict) -> None:
            if msg["type"] == "http.response.start" and raw:
                # A limit nearer the endpoint (a route's own) has set its
                # headers: they stand.
                have = {bytes(k).lower() for k, _ in msg.get("headers", [])}
                msg = dict(msg, headers=list(msg.get("headers", [])) + [h for h in raw if h[0] not in have])
            await send(msg)

        await self.app(scope, receive, send_with_headers)

    def remember(self, scope: dict, d: Any) -> None:
        if isinstance(scope.get("state"), dict):
            scope["state"]["sluice.decision"] = d

    def request(self, scope: dict, receive: Callable) -> Any:
        """What key, skip and cost get: the scope (a Starlette Request in
        :class:`sluice.starlette.SluiceMiddleware`)."""
        return scope
