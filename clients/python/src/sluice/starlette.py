"""Starlette and FastAPI: a per-route decorator, a FastAPI dependency and a
middleware, all over :class:`sluice.AsyncClient` (nothing blocks the
loop).

::

    from sluice.starlette import Limiter, SluiceMiddleware

    limiter = Limiter(sluice.AsyncClient(nodes=["10.0.0.1:6380", "10.0.0.2:6380"]))

    @app.get("/search")
    @limiter.limit("10/minute")                          # this route, per client IP
    async def search(q: str): ...

    @app.get("/export", dependencies=[Depends(limiter.depends("5/hour"))])
    async def export(): ...

    app.add_middleware(SluiceMiddleware, limiter=limiter, limit="1000/hour")  # every request

Admitted requests get the rate-limit headers (RateLimit-Policy, RateLimit,
X-RateLimit-*); refused ones 429 with Retry-After and problem+json, or,
when the client's failure policy is ``"closed"`` and sluice cannot answer,
503 with Retry-After. ``key(request)`` (default: the client's IP address)
names who is limited, None lets the request through; ``skip(request)``
true skips it; either may be a coroutine.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Optional, Union

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ._core import Algo, Decision
from ._web import Outcome, Rule, need_async
from .middleware import ASGIMiddleware
from .rate import LimitLike, as_limit

__all__ = ["Limiter", "RateLimited", "SluiceMiddleware", "problem_response", "remote_address"]


def remote_address(request: Request) -> str:
    """The client's IP address (behind a proxy, give a key that reads the
    header your proxy sets)."""
    return request.client.host if request.client else ""


class RateLimited(HTTPException):
    """Raised by :meth:`Limiter.depends` for a refused request: status 429
    (or 503 when the failure policy refused), its ``headers`` (Retry-After
    among them) and ``outcome``. FastAPI's and Starlette's default handlers
    answer it with those headers and a short detail; register
    :func:`problem_response` for the problem+json body the decorator and
    the middleware send."""

    def __init__(self, outcome: Outcome):
        # The default handlers send a JSON or text body: no problem+json type.
        super().__init__(status_code=outcome.status or 429, detail=outcome.detail(),
                         headers={k: v for k, v in outcome.headers if k != "Content-Type"})
        self.outcome = outcome
        self.decision = outcome.decision


async def problem_response(request: Request, exc: Exception) -> Response:
    """An exception handler for :class:`RateLimited`: the problem+json body
    (``app.add_exception_handler(RateLimited, problem_response)``)."""
    assert isinstance(exc, RateLimited)
    return outcome_response(exc.outcome)


def outcome_response(out: Outcome) -> Response:
    r = Response(out.body, status_code=out.status or 200)
    for k, v in out.headers:
        r.headers[k] = v
    return r


def _both(a: Optional[Callable], b: Optional[Callable]) -> Optional[Callable]:
    if a is None or b is None:
        return a or b

    async def skip(req: Any) -> bool:
        for f in (a, b):
            v = f(req)
            if inspect.isawaitable(v):
                v = await v
            if v:
                return True
        return False

    return skip


def _route_scope(req: Request) -> str:
    """A dependency's default scope: the route's path template."""
    route = req.scope.get("route")
    return f"route:{getattr(route, 'path', req.url.path)}:"


class Limiter:
    """Limits Starlette and FastAPI routes through ``client`` (a
    :class:`sluice.AsyncClient`; its ``failure`` policy decides when
    sluice cannot). ``key``, ``skip``, ``algo`` and ``headers`` are the
    defaults of every limit it makes; a limit's own ``skip`` adds to the
    limiter's."""

    def __init__(self, client: Any, *, key: Callable[[Request], Any] = remote_address,
                 skip: Optional[Callable[[Request], Any]] = None, algo: Optional[Algo] = None,
                 headers: bool = True):
        need_async(client, "sluice.starlette.Limiter")
        self.client, self.key, self.skip, self.algo, self.headers = client, key, skip, algo, headers

    def rule(self, limit: Optional[LimitLike] = None, *, path: Optional[str] = None,
             key: Optional[Callable[[Request], Any]] = None, cost: Union[int, Callable, None] = None,
             skip: Optional[Callable[[Request], Any]] = None, scope: Union[str, Callable, None] = None,
             algo: Optional[Algo] = None, window: Any = None, default_scope: Union[str, Callable] = "") -> Rule:
        return Rule(limit=limit, path=path, key=key or self.key, cost=cost, skip=_both(self.skip, skip),
                    window=window, headers=self.headers, algo=algo or self.algo,
                    scope=default_scope if scope is None else scope)

    async def check(self, rule: Rule, request: Request) -> Outcome:
        """Asks sluice for request under rule; the decision goes to
        ``request.state.sluice_decision``."""
        d: Optional[Decision] = await rule.acall(self.client, request)
        request.state.sluice_decision = d
        return rule.respond(d, self.client)

    def limit(self, limit: Optional[LimitLike] = None, *, path: Optional[str] = None,
              key: Optional[Callable[[Request], Any]] = None, cost: Union[int, Callable, None] = None,
              skip: Optional[Callable[[Request], Any]] = None, scope: Optional[str] = None,
              algo: Optional[Algo] = None, window: Any = None) -> Callable[[Callable], Callable]:
        """A decorator limiting one endpoint (Starlette's ``f(request)`` or
        any FastAPI path operation, sync or async): ``limit`` a string such
        as "10/minute" (:mod:`sluice.rate`) or ``path`` a budget. Each
        route has its own bucket per key (``scope``, default the
        function's module and name; give two routes one scope to share
        it). A refused request gets the 429 (or 503) response and the
        endpoint does not run; an admitted one gets the headers, on the
        Response it returns or on FastAPI's response (the decorator adds
        the Request and Response parameters FastAPI needs when the
        endpoint has none)."""

        lim = as_limit(limit, algo or self.algo) if limit is not None else None  # a bad string fails here

        def deco(fn: Callable) -> Callable:
            rule = self.rule(lim, path=path, key=key, cost=cost, skip=skip, scope=scope, algo=algo,
                             window=window, default_scope=f"{fn.__module__}.{fn.__qualname__}:")
            return _wrap(self, rule, fn)

        return deco

    def depends(self, limit: Optional[LimitLike] = None, *, path: Optional[str] = None,
                key: Optional[Callable[[Request], Any]] = None, cost: Union[int, Callable, None] = None,
                skip: Optional[Callable[[Request], Any]] = None, scope: Optional[str] = None,
                algo: Optional[Algo] = None, window: Any = None) -> Callable:
        """A FastAPI dependency (``Depends(limiter.depends("5/minute"))``,
        on a route or a router): raises :class:`RateLimited` for a refused
        request, sets the headers on FastAPI's response otherwise, and
        returns the decision (None when skipped). Buckets are per route
        (its path template) unless ``scope`` is given."""
        rule = self.rule(limit, path=path, key=key, cost=cost, skip=skip, scope=scope, algo=algo,
                         window=window, default_scope=_route_scope)

        async def sluice_limit(request: Request, response: Response) -> Optional[Decision]:
            out = await self.check(rule, request)
            if out.refused:
                raise RateLimited(out)
            for k, v in out.headers:
                response.headers[k] = v
            return out.decision

        return sluice_limit


def _wrap(limiter: Limiter, rule: Rule, fn: Callable) -> Callable:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    sig = inspect.signature(fn)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]

    def find(cls: type, name: str) -> Optional[str]:
        for p in params:
            if inspect.isclass(p.annotation) and issubclass(p.annotation, cls):
                return p.name
        return name if any(p.name == name and p.annotation is inspect.Parameter.empty for p in params) else None

    req_name, resp_name = find(Request, "request"), find(Response, "response")
    added = []
    if req_name is None:
        added.append(inspect.Parameter("sluice_request", inspect.Parameter.KEYWORD_ONLY, annotation=Request))
    if resp_name is None:
        added.append(inspect.Parameter("sluice_response", inspect.Parameter.KEYWORD_ONLY, annotation=Response))
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    new_sig = sig.replace(parameters=params[:at] + added + params[at:],
                          return_annotation=hints.get("return", sig.return_annotation))
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def endpoint(*args: Any, **kwargs: Any) -> Any:
        request = kwargs.pop("sluice_request", None) if req_name is None else kwargs.get(req_name)
        if request is None:
            request = next((a for a in args if isinstance(a, Request)), None)
        response = kwargs.pop("sluice_response", None) if resp_name is None else kwargs.get(resp_name)
        if request is None:
            raise TypeError(f"{fn.__qualname__}: sluice's limit needs the request (a starlette Request argument)")
        out = await limiter.check(rule, request)
        if out.refused:
            return outcome_response(out)
        result = await fn(*args, **kwargs) if is_async else await run_in_threadpool(fn, *args, **kwargs)
        if out.headers:
            target = result if isinstance(result, Response) else response
            if target is not None:
                for k, v in out.headers:
                    target.headers[k] = v
        return result

    endpoint.__signature__ = new_sig  # type: ignore[attr-defined]
    endpoint.__sluice_rule__ = rule  # type: ignore[attr-defined]
    return endpoint


class SluiceMiddleware(ASGIMiddleware):
    """:class:`sluice.middleware.ASGIMiddleware` whose ``key``, ``skip`` and
    ``cost`` get a Starlette Request: ``app.add_middleware(SluiceMiddleware,
    limiter=limiter, limit="1000/hour")``, or ``client=`` (an AsyncClient)
    instead of a limiter. Every HTTP request is asked once, keyed
    ``"ip:" + IP`` by default (the subject of a budget ``path``); the
    decision is ``request.state.sluice_decision``. A route's own limit
    (the decorator) sets its headers, which the middleware's do not
    overwrite."""

    def __init__(self, app: Callable, limiter: Optional[Limiter] = None, *, client: Any = None,
                 path: Optional[str] = None, limit: Optional[LimitLike] = None,
                 key: Optional[Callable[[Request], Any]] = None, cost: Union[int, Callable, None] = None,
                 window: Any = None, headers: Optional[bool] = None, skip: Optional[Callable[[Request], Any]] = None,
                 algo: Optional[Algo] = None):
        if (limiter is None) == (client is None):
            raise TypeError("SluiceMiddleware takes a limiter or a client (a sluice.AsyncClient)")
        if limiter is not None:
            client = limiter.client
            skip = _both(limiter.skip, skip)
            algo = algo or limiter.algo
            headers = limiter.headers if headers is None else headers
            if key is None and limiter.key is not remote_address:
                key = limiter.key
        need_async(client, "sluice.starlette.SluiceMiddleware")
        if key is None:
            key = remote_address if path is not None else (lambda r: "ip:" + remote_address(r))
        super().__init__(app, client, path=path, limit=limit, key=key, cost=cost, window=window,
                         headers=True if headers is None else headers, skip=skip, algo=algo)

    def request(self, scope: dict, receive: Callable) -> Request:
        return Request(scope, receive)

    def remember(self, scope: dict, d: Any) -> None:
        """The decision as ``request.state.sluice_decision`` (and, as
        ASGIMiddleware has it, ``scope["state"]["sluice.decision"]``)."""
        state = scope.setdefault("state", {})
        if isinstance(state, dict):
            state["sluice_decision"] = state["sluice.decision"] = d
