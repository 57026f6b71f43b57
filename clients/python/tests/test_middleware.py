import asyncio
import uuid

import sluice
from sluice.middleware import ASGIMiddleware, WSGIMiddleware


def hello_wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def call_wsgi(app, ip="10.0.0.1"):
    got = {}

    def start(status, headers, exc_info=None):
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app({"REMOTE_ADDR": ip, "PATH_INFO": "/"}, start))
    return got["status"], got["headers"], body


def test_wsgi_headers_and_429(server):
    c = sluice.Client(port=server.resp, timeout=1.0)
    app = WSGIMiddleware(hello_wsgi, c, limit=dict(rate=2, per="minute"),
                         key=lambda env: "mw:" + uuid_ + env["REMOTE_ADDR"])
    status, h, body = call_wsgi(app)
    assert status == "200 OK" and body == b"hello"
    assert h["RateLimit-Policy"] == '"burst";q=2;w=60'
    assert h["RateLimit"] == '"burst";r=1;t=30'
    assert (h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"], h["X-RateLimit-Reset"]) == ("2", "1", "30")
    call_wsgi(app)
    status, h, body = call_wsgi(app)
    assert status.startswith("429") and h["Retry-After"] == "30"
    assert h["Content-Type"] == "application/problem+json"
    assert b'"status":429' in body and b'"limited_by":"mw:' in body


def test_fail_closed_is_503(dead_port):
    c = sluice.Client(port=dead_port, failure="closed")
    status, h, body = call_wsgi(WSGIMiddleware(hello_wsgi, c, path="demo/api"))
    assert status.startswith("503") and b"limiter-unavailable" in body
    c = sluice.Client(port=dead_port, failure="open")
    status, h, body = call_wsgi(WSGIMiddleware(hello_wsgi, c, path="demo/api"))
    assert status == "200 OK" and "RateLimit" not in h


def test_asgi(server):
    async def hello(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hi"})

    async def main():
        c = sluice.AsyncClient(port=server.resp, timeout=1.0)
        app = ASGIMiddleware(hello, c, limit=dict(rate=1, per=60), key=lambda s: "asgi:" + uuid_)
        out = []
        for _ in range(2):
            sent = []

            async def send(m):
                sent.append(m)

            await app({"type": "http", "client": ("10.0.0.2", 1234)}, None, send)
            out.append(sent[0])
        return out

    ok, refused = asyncio.run(main())
    assert ok["status"] == 200 and (b"ratelimit", b'"burst";r=0;t=60') in ok["headers"]
    assert refused["status"] == 429 and (b"retry-after", b"60") in refused["headers"]


uuid_ = uuid.uuid4().hex[:8]
