"""Flask: an extension with a per-view decorator and an optional limit on
every request, over :class:`sluice.Client`::

    from sluice.flask import Sluice

    limiter = Sluice(client=sluice.Client(nodes=["10.0.0.1:6380", "10.0.0.2:6380"], failure="closed"),
                     default_limit="1000/hour")
    limiter.init_app(app)          # or Sluice(app, ...)

    @app.get("/search")
    @limiter.limit("10/minute")    # this view, per client IP, instead of the default
    def search(): ...

    @app.get("/healthz")
    @limiter.exempt                # not limited at all
    def healthz(): ...

Without ``client``, ``init_app`` builds one from the app's config:
``SLUICE_NODES`` (a list of "host:port", or one string; default
"127.0.0.1:6380"), ``SLUICE_TIMEOUT`` (seconds, 0.05), ``SLUICE_FAILURE``
("open" or "closed") and ``SLUICE_DEFAULT_LIMIT``.

Admitted requests get the rate-limit headers; refused ones 429 with
Retry-After and problem+json, or 503 with Retry-After when the client's
failure policy is "closed" and sluice cannot answer. ``key(request)``
(default: the client's IP address) names who is limited, None lets the
request through; ``skip(request)`` true skips it. Both get
``flask.request``. The decision is in ``flask.g.sluice_decision``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Union

import flask

from ._core import Algo
from ._web import Outcome, Rule, need_sync
from .rate import LimitLike, as_limit

__all__ = ["Sluice", "remote_address"]


def remote_address(request: "flask.Request") -> str:
    return request.remote_addr or ""


class Sluice:
    """The Flask extension. ``default_limit`` (or ``default_path``, a
    budget) applies to every request of the app but those of views with a
    limit of their own or marked :meth:`exempt`."""

    def __init__(self, app: Optional[flask.Flask] = None, client: Any = None, *,
                 key: Callable[[Any], Any] = remote_address, skip: Optional[Callable[[Any], Any]] = None,
                 default_limit: Optional[LimitLike] = None, default_path: Optional[str] = None,
                 algo: Optional[Algo] = None, headers: bool = True):
        if client is not None:
            need_sync(client, "sluice.flask.Sluice")
        self.client, self.key, self.skip, self.algo, self.headers = client, key, skip, algo, headers
        self._default_limit, self._default_path = default_limit, default_path
        self.default: Optional[Rule] = None
        if default_limit is not None or default_path is not None:
            self.default = self._rule(default_limit, default_path, None, None, None, "default:", None, None,
                                      "default_limit")
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        if self.client is None:
            from .client import Client
            self.client = Client(nodes=app.config.get("SLUICE_NODES", "127.0.0.1:6380"),
                                 timeout=app.config.get("SLUICE_TIMEOUT", 0.05),
                                 failure=app.config.get("SLUICE_FAILURE", "open"))
        if self.default is None and app.config.get("SLUICE_DEFAULT_LIMIT"):
            self.default = self._rule(app.config["SLUICE_DEFAULT_LIMIT"], None, None, None, None, "default:",
                                      None, None, "SLUICE_DEFAULT_LIMIT")
        app.extensions["sluice"] = self
        app.before_request(self._before)
        app.after_request(self._after)

    def _rule(self, limit: Optional[LimitLike], path: Optional[str], key: Optional[Callable], cost: Any,
              skip: Optional[Callable], scope: str, algo: Optional[Algo], window: Any,
              name: str = "limit") -> Rule:
        sk = skip
        if self.skip is not None and skip is not None:
            outer = self.skip
            sk = lambda r: outer(r) or skip(r)  # noqa: E731
        elif skip is None:
            sk = self.skip
        return Rule(limit=limit, path=path, key=key or self.key, cost=cost, skip=sk,
                    window=window, headers=self.headers, algo=algo or self.algo, scope=scope, name=name)

    def check(self, rule: Rule) -> Outcome:
        """Asks sluice for the current request under rule."""
        d = rule.call(self.client, flask.request)
        flask.g.sluice_decision = d
        return rule.respond(d, self.client)

    @staticmethod
    def response(out: Outcome) -> flask.Response:
        """The 429 or 503 answer of a refusal."""
        return flask.Response(out.body, status=out.status, headers=out.headers)

    def limit(self, limit: Optional[LimitLike] = None, *, path: Optional[str] = None,
              key: Optional[Callable[[Any], Any]] = None, cost: Union[int, Callable, None] = None,
              skip: Optional[Callable[[Any], Any]] = None, scope: Optional[str] = None,
              algo: Optional[Algo] = None, window: Any = None) -> Callable[[Callable], Callable]:
        """A decorator limiting one view: ``limit`` a string such as
        "10/minute" (:mod:`sluice.rate`) or ``path`` a budget. Each view
        has its own bucket per key (``scope``, default the function's
        module and name); the default limit does not apply to it."""

        lim = as_limit(limit, algo or self.algo) if limit is not None else None  # a bad string fails here

        def deco(fn: Callable) -> Callable:
            rule = self._rule(lim, path, key, cost, skip, scope if scope is not None
                              else f"{fn.__module__}.{fn.__qualname__}:", algo, window)

            @functools.wraps(fn)
            def view(*args: Any, **kwargs: Any) -> Any:
                out = self.check(rule)
                if out.refused:
                    return self.response(out)
                resp = flask.make_response(fn(*args, **kwargs))
                for k, v in out.headers:
                    resp.headers[k] = v
                return resp

            view.__sluice_rule__ = rule  # type: ignore[attr-defined]
            return view

        return deco

    @staticmethod
    def exempt(fn: Callable) -> Callable:
        """Marks a view that the default limit does not apply to."""
        fn.__sluice_exempt__ = True  # type: ignore[attr-defined]
        return fn

    def _before(self) -> Optional[flask.Response]:
        if self.default is None:
            return None
        view = flask.current_app.view_functions.get(flask.request.endpoint or "")
        if view is not None and (getattr(view, "__sluice_exempt__", False) or hasattr(view, "__sluice_rule__")):
            return None
        out = self.check(self.default)
        if out.refused:
            return self.response(out)
        flask.g._sluice_headers = out.headers
        return None

    def _after(self, resp: flask.Response) -> flask.Response:
        hs: List = flask.g.pop("_sluice_headers", None) or []
        for k, v in hs:
            resp.headers.setdefault(k, v)
        return resp
