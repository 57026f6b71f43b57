"""Each framework adapter, run by the real framework against the real
binary: the limit, the headers, Retry-After on every refusal (the failure
policy's 503 included), skip, and the failure policy."""

import importlib
import os
import uuid

import pytest

import sluice


def need(module: str):
    """The framework, or a skip where it is not installed; CI
    (SLUICE_REQUIRE_TOOLS) fails instead (Debian: python3-starlette,
    python3-fastapi, python3-flask, python3-httpx)."""
    if os.environ.get("SLUICE_REQUIRE_TOOLS"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


need("starlette")
need("httpx")  # Starlette's TestClient
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from sluice.starlette import Limiter, RateLimited, SluiceMiddleware, problem_response  # noqa: E402

HEADERS = ("RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def user() -> str:
    return uuid.uuid4().hex[:12]


def by_user(request):
    return request.headers.get("x-user")


def skip_health(request):
    return request.url.path == "/health" if hasattr(request, "url") else request.path == "/health"


def assert_limited(responses, limit: int, window: int):
    """limit admitted with falling remaining counts, then a 429 with
    Retry-After and problem+json."""
    ok, refused = responses[:limit], responses[limit]
    for i, r in enumerate(ok):
        assert r.status_code == 200, (i, r.status_code, r.text)
        h = r.headers
        assert h["RateLimit-Policy"] == f'"burst";q={limit};w={window}'
        assert h["X-RateLimit-Limit"] == str(limit)
        assert h["X-RateLimit-Remaining"] == str(limit - 1 - i)
        assert h["RateLimit"].startswith(f'"burst";r={limit - 1 - i};t=')
    assert refused.status_code == 429, refused.text
    ra = int(refused.headers["Retry-After"])
    assert 1 <= ra <= window
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    return refused


def assert_unavailable(r):
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) >= 1
    assert not any(h in r.headers for h in HEADERS)


def aclient(port, **kw):
    return sluice.AsyncClient(port=port, timeout=kw.pop("timeout", 10.0), **kw)  # a loaded machine is slow, not down


# -- Starlette ----------------------------------------------------------


async def by_user_async(request):
    return request.headers.get("x-user")


async def skip_async(request):
    return request.headers.get("x-skip") == "1"


def starlette_app(client):
    # Coroutines for key and skip: an ASGI app may look either up without blocking.
    limiter = Limiter(client, key=by_user_async, skip=skip_async)

    @limiter.limit("2/minute")
    async def hello(request: Request):
        return PlainTextResponse("hello")

    @limiter.limit("3/hour")
    def sync_view(request):  # a sync endpoint: run in the thread pool
        return JSONResponse({"ok": True})

    async def health(request):
        return PlainTextResponse("ok")

    async def free(request):
        return PlainTextResponse(str(request.state.sluice_decision.remaining))

    app = Starlette(routes=[Route("/hello", hello), Route("/sync", sync_view), Route("/health", health),
                            Route("/free", free)])
    # Every request but /health, keyed by x-mw (none: undecided).
    app.add_middleware(SluiceMiddleware, limiter=limiter, limit="5/minute", skip=skip_health,
                       key=lambda r: r.headers.get("x-mw"))
    return app


def test_starlette_decorator_and_middleware(server):
    with TestClient(starlette_app(aclient(server.resp))) as t:
        u = user()
        refused = assert_limited([t.get("/hello", headers={"x-user": u}) for _ in range(3)], 2, 60)
        assert refused.headers["Content-Type"] == "application/problem+json"
        assert refused.json()["status"] == 429 and refused.json()["limited_by"].endswith(":" + u)
        # Each route has its own bucket; a sync endpoint works the same.
        assert_limited([t.get("/sync", headers={"x-user": u}) for _ in range(4)], 3, 3600)
        # skip: nothing asked, no headers, nothing spent.
        v = user()
        for _ in range(5):
            r = t.get("/hello", headers={"x-user": v, "x-skip": "1"})
            assert r.status_code == 200 and "RateLimit" not in r.headers
        assert t.get("/hello", headers={"x-user": v}).headers["X-RateLimit-Remaining"] == "1"
        # The middleware's own limit, for every request but /health.
        w = user()
        got = [t.get("/free", headers={"x-mw": w}) for _ in range(6)]
        assert_limited(got, 5, 60)
        assert got[0].text == "4"
        for _ in range(8):
            r = t.get("/health", headers={"x-mw": w})
            assert r.status_code == 200 and "RateLimit" not in r.headers
        # Under both, a route's own limit's headers stand; either refuses.
        x = user()
        r = t.get("/hello", headers={"x-user": x, "x-mw": x})
        assert r.headers["RateLimit-Policy"] == '"burst";q=2;w=60' and r.headers["X-RateLimit-Remaining"] == "1"
        got = [t.get("/hello", headers={"x-user": user(), "x-mw": x}) for _ in range(5)]
        assert [r.status_code for r in got] == [200] * 4 + [429]
        assert got[4].headers["RateLimit-Policy"] == '"burst";q=5;w=60' and "Retry-After" in got[4].headers
        # A request without a key goes ahead undecided.
        r = t.get("/hello")
        assert r.status_code == 200 and "RateLimit" not in r.headers


def test_starlette_failure_policy(dead_port):
    with TestClient(starlette_app(aclient(dead_port, failure="closed", timeout=0.05))) as t:
        assert_unavailable(t.get("/hello", headers={"x-user": user()}))
        assert_unavailable(t.get("/free", headers={"x-mw": user()}))
        assert t.get("/health").status_code == 200  # skipped: the policy is not asked
    with TestClient(starlette_app(aclient(dead_port, failure="open", timeout=0.05))) as t:
        r = t.get("/hello", headers={"x-user": user()})
        assert r.status_code == 200 and r.text == "hello" and "RateLimit" not in r.headers
    # A local fallback limit refuses like the server: 429 with Retry-After.
    with TestClient(starlette_app(aclient(dead_port, failure=sluice.Fallback(rate=1, per=60), timeout=0.05))) as t:
        u = user()
        got = [t.get("/hello", headers={"x-user": u}) for _ in range(2)]
        assert [r.status_code for r in got] == [200, 429]
        assert got[0].headers["X-RateLimit-Limit"] == "1" and 1 <= int(got[1].headers["Retry-After"]) <= 60


def test_starlette_needs_an_async_client(server):
    with pytest.raises(TypeError, match="needs a sluice.AsyncClient"):
        Limiter(sluice.Client(port=server.resp))
    with pytest.raises(ValueError, match=r"limit: cannot read '10 a minute'.*\"N/unit\""):
        Limiter(aclient(server.resp)).limit("10 a minute")


# -- FastAPI ------------------------------------------------------------


def fastapi_app(client, problem: bool = False):
    fastapi = need("fastapi")
    from fastapi import Depends, FastAPI, Response

    limiter = Limiter(client, key=by_user, skip=lambda r: r.headers.get("x-skip") == "1")
    app = FastAPI()
    if problem:
        app.add_exception_handler(RateLimited, problem_response)

    @app.get("/items/{item}")
    @limiter.limit("2/minute")
    async def item(item: int, q: str = "none"):  # neither Request nor Response: the decorator adds them
        return {"item": item, "q": q}

    @app.get("/own")
    @limiter.limit("2/minute")
    async def own(request: fastapi.Request, response: Response):
        response.headers["X-Own"] = "1"
        return {"path": request.url.path}

    @app.get("/sync")
    @limiter.limit("2/minute")
    def sync_item():
        return {"sync": True}

    @app.get("/export")
    async def export(d=Depends(limiter.depends("3/hour"))):
        return {"remaining": d.remaining if d else None}

    @app.get("/budget", dependencies=[Depends(limiter.depends(path="pyadapt/api"))])
    async def budget():
        return {"ok": True}

    assert fastapi.__version__
    return app


def test_fastapi_decorator(server):
    with TestClient(fastapi_app(aclient(server.resp))) as t:
        u = user()
        got = [t.get("/items/7?q=x", headers={"x-user": u}) for _ in range(3)]
        assert got[0].json() == {"item": 7, "q": "x"}  # the parameters still reach the endpoint
        refused = assert_limited(got, 2, 60)
        assert refused.headers["Content-Type"] == "application/problem+json"
        got = [t.get("/own", headers={"x-user": u}) for _ in range(3)]
        assert got[0].json() == {"path": "/own"} and got[0].headers["X-Own"] == "1"
        assert_limited(got, 2, 60)
        assert_limited([t.get("/sync", headers={"x-user": u}) for _ in range(3)], 2, 60)
        r = t.get("/items/7", headers={"x-user": u, "x-skip": "1"})
        assert r.status_code == 200 and "RateLimit" not in r.headers
        assert t.get("/items/7").status_code == 200  # no key: undecided


def test_fastapi_dependency(server):
    server.redis.execute_command("RL.BUDGET", "SET", "pyadapt/api", "RATE", 2, "PER", "minute", "SCOPE", "user")
    with TestClient(fastapi_app(aclient(server.resp))) as t:
        u = user()
        got = [t.get("/export", headers={"x-user": u}) for _ in range(4)]
        assert [r.json().get("remaining") for r in got[:3]] == [2, 1, 0]
        refused = assert_limited(got, 3, 3600)
        assert "rate limit exceeded at route:/export:" + u in refused.json()["detail"]  # FastAPI's own handler
        r = t.get("/export", headers={"x-user": u, "x-skip": "1"})
        assert r.status_code == 200 and r.json() == {"remaining": None} and "RateLimit" not in r.headers
        got = [t.get("/budget", headers={"x-user": u}) for _ in range(3)]
        assert [r.status_code for r in got] == [200, 200, 429]
        assert got[0].headers["X-RateLimit-Limit"] == "2" and "Retry-After" in got[2].headers
    with TestClient(fastapi_app(aclient(server.resp), problem=True)) as t:
        u = user()
        got = [t.get("/export", headers={"x-user": u}) for _ in range(4)]
        assert got[3].status_code == 429 and got[3].headers["Content-Type"] == "application/problem+json"
        assert got[3].json()["limited_by"] == "route:/export:" + u and "Retry-After" in got[3].headers


def test_fastapi_failure_policy(dead_port):
    with TestClient(fastapi_app(aclient(dead_port, failure="closed", timeout=0.05))) as t:
        assert_unavailable(t.get("/items/1", headers={"x-user": user()}))
        assert_unavailable(t.get("/export", headers={"x-user": user()}))
    with TestClient(fastapi_app(aclient(dead_port, failure="open", timeout=0.05))) as t:
        r = t.get("/export", headers={"x-user": user()})
        assert r.status_code == 200 and r.json() == {"remaining": -1} and "RateLimit" not in r.headers


# -- Flask --------------------------------------------------------------


def flask_app(client, **kw):
    flask = need("flask")
    from sluice.flask import Sluice

    app = flask.Flask(__name__)
    ext = Sluice(client=client, key=by_user, skip=lambda r: r.headers.get("x-skip") == "1", **kw)
    ext.init_app(app)

    @app.get("/hello")
    @ext.limit("2/minute")
    def hello():
        return "hello"

    @app.get("/health")
    @ext.exempt
    def health():
        return "ok"

    @app.get("/other")
    def other():
        return {"remaining": flask.g.sluice_decision.remaining}

    return app


def test_flask_extension(server):
    app = flask_app(sluice.Client(port=server.resp, timeout=10.0), default_limit="4/hour")
    t = app.test_client()
    u = user()
    refused = assert_limited([t.get("/hello", headers={"x-user": u}) for _ in range(3)], 2, 60)
    assert refused.headers["Content-Type"] == "application/problem+json" and refused.json["status"] == 429
    got = [t.get("/other", headers={"x-user": u}) for _ in range(5)]  # the default limit
    assert_limited(got, 4, 3600)
    assert got[0].json == {"remaining": 3}
    for _ in range(6):
        r = t.get("/health", headers={"x-user": u})  # exempt
        assert r.status_code == 200 and "RateLimit" not in r.headers
    v = user()
    for _ in range(4):
        r = t.get("/hello", headers={"x-user": v, "x-skip": "1"})
        assert r.status_code == 200 and "RateLimit" not in r.headers
    assert t.get("/hello", headers={"x-user": v}).headers["X-RateLimit-Remaining"] == "1"


def test_flask_failure_policy_and_config(dead_port):
    import flask
    from sluice.flask import Sluice

    t = flask_app(sluice.Client(port=dead_port, failure="closed"), default_limit="4/hour").test_client()
    assert_unavailable(t.get("/hello", headers={"x-user": user()}))
    assert_unavailable(t.get("/other", headers={"x-user": user()}))
    assert t.get("/health").status_code == 200
    t = flask_app(sluice.Client(port=dead_port, failure="open")).test_client()
    r = t.get("/hello", headers={"x-user": user()})
    assert r.status_code == 200 and "RateLimit" not in r.headers
    t = flask_app(sluice.Client(port=dead_port, failure=sluice.Fallback(rate=1, per=60))).test_client()
    got = [t.get("/hello", headers={"x-user": "fb"}) for _ in range(2)]
    assert [r.status_code for r in got] == [200, 429] and 1 <= int(got[1].headers["Retry-After"]) <= 60
    # Built from the app's config.
    app = flask.Flask(__name__)
    app.config.update(SLUICE_NODES=[f"127.0.0.1:{dead_port}"], SLUICE_FAILURE="closed",
                      SLUICE_DEFAULT_LIMIT="10/minute")
    ext = Sluice(app)
    assert ext.client.policy.failure == "closed" and ext.default.limit.rate == 10

    @app.get("/")
    def index():
        return "x"

    assert_unavailable(app.test_client().get("/"))
    with pytest.raises(TypeError, match="needs a sluice.Client"):
        Sluice(client=sluice.AsyncClient())
    # A bad limit names where it came from.
    bad = flask.Flask(__name__)
    bad.config.update(SLUICE_NODES=f"127.0.0.1:{dead_port}", SLUICE_DEFAULT_LIMIT="100 an hour")
    with pytest.raises(ValueError, match=r"SLUICE_DEFAULT_LIMIT: cannot read '100 an hour'; give \"N/unit\""):
        Sluice(bad)
    with pytest.raises(ValueError, match="default_limit: '1/fortnight' has an unknown unit"):
        Sluice(client=sluice.Client(port=dead_port), default_limit="1/fortnight")


# -- WSGI / ASGI middleware: limit strings, skip, the 503's Retry-After --


def test_wsgi_middleware_strings_skip_and_503(server, dead_port):
    from sluice.middleware import WSGIMiddleware

    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hi"]

    k = user()
    app = WSGIMiddleware(hello, sluice.Client(port=server.resp, timeout=10.0), limit="1/minute",
                         key=lambda env: k, skip=lambda env: env.get("PATH_INFO") == "/health")
    got = []

    def start(status, headers, exc_info=None):
        got.append((status, dict(headers)))

    for path in ("/", "/health", "/"):
        b"".join(app({"PATH_INFO": path, "REMOTE_ADDR": "10.0.0.1"}, start))
    assert [s for s, _ in got] == ["200 OK", "200 OK", "429 Too Many Requests"]
    assert "RateLimit" not in got[1][1] and got[2][1]["Retry-After"] == "60"
    down = WSGIMiddleware(hello, sluice.Client(port=dead_port, failure="closed"), limit="1/minute")
    got.clear()
    b"".join(down({"PATH_INFO": "/", "REMOTE_ADDR": "10.0.0.1"}, start))
    assert got[0][0].startswith("503") and got[0][1]["Retry-After"] == "1"
