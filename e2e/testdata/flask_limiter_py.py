"""Runs Flask-Limiter (Debian's python3-flask-limiter 3.3, over python3-limits
2.8), unchanged, configured as its documentation configures it, against the
server on SLUICE_PORT: a Flask app with a default limit, decorated limits,
a shared limit, a cost, a conditional deduction and an exempt route, under
each strategy, driven through Flask's test client. It prints what each
request got as one JSON line: the status, X-RateLimit-Limit and
X-RateLimit-Remaining, and whether X-RateLimit-Reset and Retry-After (whole
seconds of the clock) are about a minute away.
With SLUICE_PORTS (three nodes), three instances of one app, each on a
different node, take turns serving 90 requests against one shared limit
of 50 an hour, and it prints how many each strategy admitted.
e2e/flasklimiter_test.go compares the first against redis-server's."""
import json
import os
import sys
import time

from flask import Flask, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address


def about_a_minute(seconds):
    # A 1-minute window's reset, seen right after the hit that opened it:
    # whole seconds of the clock, so say only that it lies within the next
    # minute, not past and not later.
    return 1 <= seconds <= 61


def answer(response):
    h = response.headers
    out = [response.status_code, h.get("X-RateLimit-Limit"), h.get("X-RateLimit-Remaining")]
    reset, retry = h.get("X-RateLimit-Reset"), h.get("Retry-After")
    out.append(None if reset is None else about_a_minute(int(reset) - time.time()))
    out.append(None if retry is None else about_a_minute(int(retry)))
    return out


def single_app(port, strategy):
    app = Flask(f"single-{strategy}")
    app.testing = True  # a storage error reaches the caller, not a 500
    limiter = Limiter(
        get_remote_address,
        app=app,
        default_limits=["10/minute", "100/hour"],
        storage_uri=f"redis://127.0.0.1:{port}",
        strategy=strategy,
        headers_enabled=True,
        key_prefix=strategy,  # the strategies keep different values under one key
    )
    shared = limiter.shared_limit("4/minute", scope="ab")

    @app.route("/five")
    @limiter.limit("5/minute")
    def five():
        return "five"

    @app.route("/default")
    def default():
        return "default"

    @app.route("/a")
    @shared
    def a():
        return "a"

    @app.route("/b")
    @shared
    def b():
        return "b"

    @app.route("/cost")
    @limiter.limit("5/minute", cost=2)
    def cost():
        return "cost"

    @app.route("/deduct")
    @limiter.limit("2/minute", deduct_when=lambda response: response.status_code == 400)
    def deduct():
        return ("bad", 400) if request.args.get("fail") else "good"

    @app.route("/exempt")
    @limiter.exempt
    def exempt():
        return "exempt"

    return app


def single(port):
    out = []
    for strategy in ("fixed-window", "moving-window", "fixed-window-elastic-expiry"):
        app = single_app(port, strategy)
        c = app.test_client()
        other = app.test_client()
        other.environ_base["REMOTE_ADDR"] = "10.0.0.2"
        out.append([strategy + " five", [answer(c.get("/five")) for _ in range(7)]])
        out.append([strategy + " five, another address", answer(other.get("/five"))])
        out.append([strategy + " default", [answer(c.get("/default")) for _ in range(12)]])
        out.append([strategy + " shared", [answer(c.get("/a" if i % 2 else "/b")) for i in range(6)]])
        out.append([strategy + " cost 2", [answer(c.get("/cost")) for _ in range(4)]])
        out.append([strategy + " deduct on 400", [answer(c.get(u)) for u in
                                                  ("/deduct", "/deduct?fail=1", "/deduct", "/deduct?fail=1", "/deduct", "/deduct?fail=1")]])
        out.append([strategy + " exempt", answer(c.get("/exempt"))])
    print(json.dumps(out))


def cluster_app(port, strategy):
    app = Flask(f"node-{port}")
    app.testing = True
    # No headers: the after-request read of the window could meet an
    # election after the hit was counted, and asking again would count it
    # twice. The hit alone is decided or not.
    limiter = Limiter(get_remote_address, app=app, storage_uri=f"redis://127.0.0.1:{port}",
                      strategy=strategy, key_prefix=strategy)

    @app.route("/api")
    @limiter.shared_limit("50/hour", scope="api")
    def api():
        return "ok"

    return app.test_client()


def cluster(ports):
    counts = {}
    for strategy in ("fixed-window", "moving-window"):
        clients = [cluster_app(p, strategy) for p in ports]
        admitted = 0
        for i in range(90):
            for attempt in range(200):
                try:
                    status = clients[i % 3].get("/api").status_code
                    break
                except Exception as e:  # an election: TRYAGAIN, not decided; ask again
                    if "TRYAGAIN" not in str(e) and "LOADING" not in str(e):
                        raise
                    time.sleep(0.02)
            else:
                sys.exit(f"request {i}: TRYAGAIN 200 times")
            if status not in (200, 429):
                sys.exit(f"request {i}: status {status}")
            admitted += status == 200
        counts[strategy] = admitted
    print(json.dumps(counts, sort_keys=True))


if os.environ.get("SLUICE_PORTS"):
    cluster(os.environ["SLUICE_PORTS"].split(","))
else:
    single(os.environ["SLUICE_PORT"])
