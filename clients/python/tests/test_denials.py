"""A refused key is not asked again before its retry_after."""

import time
import uuid

import sluice


def test_refused_key_not_asked_before_retry_after(server):
    srv = server
    c = sluice.Client(port=srv.resp, timeout=1.0)
    k = "deny:" + uuid.uuid4().hex[:8]
    assert c.acquire(k, rate=1, per="2s", burst=1).allowed
    denied = c.acquire(k, rate=1, per="2s", burst=1)
    assert not denied.allowed and denied.source == "server" and denied.retry_after > 1000

    at = time.monotonic()
    before = srv.commands()
    until = at + denied.retry_after / 1000 - 0.2
    n = 0
    while time.monotonic() < until:
        d = c.acquire(k, rate=1, per="2s", burst=1)
        assert not d.allowed and d.source == "cache" and 0 < d.retry_after <= denied.retry_after
        n += 1
        time.sleep(0.01)
    # The INFO that reads the count is the one command in between.
    assert srv.commands() - before == 1, "the refused key was asked again"
    assert n > 10

    # Another key, or another limit on the key, is asked.
    assert c.acquire(k + "x", rate=1, per="2s", burst=1).source == "server"
    assert c.acquire(k, rate=5, per="2s", burst=5).source == "server"

    # Once retry_after has passed, the server is asked again and admits.
    time.sleep(max(0.0, at + denied.retry_after / 1000 + 0.05 - time.monotonic()))
    d = c.acquire(k, rate=1, per="2s", burst=1)
    assert d.source == "server"

