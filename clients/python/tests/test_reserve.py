"""Reservations against the real binary: reserve, settle (below and above
the estimate), release, renew, NORESERVATION, concurrency, the context
manager, and the failure policy with sluice stopped or silent."""

import asyncio
import time
import uuid

import pytest

import sluice

# 1000 tokens a day: a token refills every 86.4 s, so the levels below are
# exact however slow the machine.
DAY = dict(rate=1000, per="day")


def uniq(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:8]}"


def client(srv, **kw):
    return sluice.Client(port=srv.resp, timeout=kw.pop("timeout", 2.0), **kw)


def left(c, k) -> int:
    return c.peek(k, cost=0, **DAY).remaining


def test_settle_below_and_above_the_estimate(server):
    c = client(server)
    k = uniq("llm")
    r = c.reserve(k, 500, ttl=120, **DAY)
    assert isinstance(r, sluice.Reservation) and isinstance(r, sluice.Decision)
    assert (r.allowed, r.remaining, r.limit, r.retry_after, r.limited_by, r.source) == (True, 500, 1000, 0, k, "server")
    assert r.id
    d = c.settle(r, 320)  # 180 fewer than reserved: they go back
    assert (d.allowed, d.remaining, d.limit, d.limited_by) == (True, 680, 1000, k)
    assert left(c, k) == 680
    with pytest.raises(sluice.NoReservation) as e:
        c.settle(r.id, 320)
    assert e.value.code == "NORESERVATION" and isinstance(e.value, sluice.SluiceError)

    r = c.reserve(k, 100, **DAY)
    assert r.remaining == 580
    d = c.settle(r.id, 900)  # 800 more than reserved: charged, never refused
    assert d.allowed and d.remaining == 0
    assert left(c, k) == 0
    d = c.acquire(k, **DAY)  # the debt: 220 tokens, then this one
    assert not d.allowed and d.retry_after > 220 * 86400
    assert c.policy.breaker.state == "closed"


def test_release_and_renew(server):
    c = client(server)
    k = uniq("llm")
    r = c.reserve(k, 400, **DAY)
    assert left(c, k) == 600
    assert c.release(r) is True
    assert left(c, k) == 1000
    assert c.release(r) is False
    assert c.renew(r, 60) is False
    with pytest.raises(sluice.NoReservation):
        c.settle(r, 1)

    # Renewing moves the expiry: the slot's next free moment follows it.
    g = uniq("gpu")
    r = c.reserve(g, 1, concurrency=1, ttl=30)
    assert r.allowed and r.id
    refused = c.reserve(g, 1, concurrency=1)
    assert not refused.allowed and 0 < refused.retry_after <= 30000
    assert c.renew(r, 3600) is True
    refused = c.reserve(g, 1, concurrency=1)
    assert not refused.allowed and refused.retry_after > 600000
    assert c.release(r.id) is True


def test_concurrency_limit(server):
    c = client(server)
    g = uniq("gpu")
    a = c.reserve(g, 1, concurrency=2, ttl=60)
    b = c.reserve(g, 1, concurrency=2, ttl=60)
    assert a.allowed and b.allowed and a.id != b.id
    third = c.reserve(g, 1, concurrency=2, ttl=60)
    assert (third.allowed, third.remaining, third.limit, third.limited_by, third.id) == \
        (False, 0, 2, f"concurrency:{g}", None)
    assert 0 < third.retry_after <= 60000
    assert c.settle(third, 1) is None and c.release(third) is False  # nothing held, nothing sent
    assert c.release(a) is True
    third = c.reserve(g, 1, concurrency=2, ttl=60)  # not a cached refusal: the slot is free
    assert third.allowed and third.id
    c.settle(b, 1)
    c.release(third)


def test_wait_for_a_slot_beyond_the_deadline(server):
    c = client(server, timeout=1.0)
    g = uniq("gpu")
    first = c.reserve(g, 1, concurrency=1, ttl=2.5)  # expires in 2.5 s, settled at its estimate
    assert (first.allowed, first.source) == (True, "server")
    r = c.reserve(g, 1, concurrency=1, wait=30)  # waits past the 1 s deadline, which grows by the wait
    assert (r.allowed, r.source) == (True, "server") and r.id
    c.release(r)


def test_budget_form_and_degrade(server):
    c = client(server)
    p = uniq("pyres").replace(":", "-")
    server.redis.execute_command(
        "RL.BUDGET", "SET", p, '{"scope":"user","sustained":{"rate":1000,"window":"day"},"concurrency":2}')
    r = c.reserve(p, 100, key="alice", ttl=60)
    assert (r.allowed, r.remaining, r.limit, r.limited_by) == (True, 900, 1000, f"{p}#alice")
    d = c.settle(r, 40)
    assert d.remaining == 960
    assert c.peek_budget(p, key="alice", cost=0).remaining == 960
    with pytest.raises(sluice.SluiceError) as e:
        c.reserve("nosuch/path", 1)
    assert e.value.code == "NOBUDGET" and not isinstance(e.value, sluice.NoReservation)

    # Let through over a degrade limit: admitted, nothing held, no id.
    dg = uniq("pydeg").replace(":", "-")
    server.redis.execute_command("RL.BUDGET", "SET", dg, "RATE", 1, "PER", "hour", "STRATEGY", "degrade")
    assert c.reserve(dg, 1).id
    r = c.reserve(dg, 1)
    assert (r.allowed, r.degraded, r.id) == (True, True, None)
    assert c.settle(r, 1) is None and c.release(r) is False and c.renew(r, 10) is False


def test_context_manager(server):
    c = client(server)
    g = uniq("gpu")
    with c.reservation(g, 1, concurrency=1, ttl=60) as r:
        assert r and r.id and r.limited_by == f"concurrency:{g}"
        with c.reservation(g, 1, concurrency=1) as refused:
            assert not refused and refused.id is None
        assert r.settle(1).allowed and r.ended
    with c.reservation(g, 1, concurrency=1) as r:  # settled above: the slot is free
        assert r
    # Left without settle: released.
    with pytest.raises(RuntimeError):
        with c.reservation(g, 1, concurrency=1) as r:
            assert r
            raise RuntimeError("the work failed")
    assert not r.ended
    with pytest.raises(sluice.NoReservation):
        c.settle(r.reservation, 1)  # the block's exit released it
    k = uniq("llm")
    with c.reservation(k, 300, **DAY):
        assert left(c, k) == 700
    assert left(c, k) == 1000


def test_asyncio(server):
    async def main():
        async with sluice.AsyncClient(port=server.resp, timeout=2.0) as c:
            k = uniq("allm")
            r = await c.reserve(k, 500, **DAY)
            assert r.remaining == 500 and r.id
            assert (await c.settle(r, 100)).remaining == 900
            with pytest.raises(sluice.NoReservation):
                await c.settle(r, 100)
            assert await c.release(r) is False
            g = uniq("agpu")
            async with c.reservation(g, 1, concurrency=1, ttl=60) as h:
                assert h and await h.renew(120) is True
                assert not (await c.reserve(g, 1, concurrency=1)).allowed
            assert await c.release(h.reservation) is False  # released on leaving
            async with c.reservation(g, 1, concurrency=1) as h:
                assert (await h.settle(1)).allowed and h.ended

    asyncio.run(main())


@pytest.mark.parametrize("where", ["dead_port", "silent_port"])
@pytest.mark.parametrize("failure,source,allowed", [
    ("open", "fail_open", True), ("closed", "fail_closed", False),
    (sluice.Fallback(rate=10, per=3600), "fallback", True)])
def test_failure_policy_within_the_deadline(request, where, failure, source, allowed):
    port = request.getfixturevalue(where)
    c = sluice.Client(port=port, timeout=0.2, failure=failure, breaker_failures=2)
    for i in range(3):  # two failures, then the open breaker
        t0 = time.monotonic()
        r = c.reserve("llm:acme", 1, rate=10, ttl=60)
        took = time.monotonic() - t0
        assert isinstance(r, sluice.Reservation)
        assert (r.allowed, r.source, r.id) == (allowed, source, None), i
        assert r.error is not None
        assert took < 5, f"call {i} took {took:.1f} s with a 0.2 s deadline"
    assert c.policy.breaker.state == "open"
    # Decided locally: settling or releasing it sends nothing.
    assert c.settle(r, 5) is None and c.release(r) is False and c.renew(r, 60) is False
    with c.reservation("llm:acme", 1, rate=10) as h:
        assert h.source == source and h.settle(1) is None
    # An id from earlier cannot be settled while sluice is away.
    with pytest.raises(sluice.Unavailable):
        c.settle("0123@elsewhere", 5)


def test_fallback_counts_estimates(dead_port):
    c = sluice.Client(port=dead_port, failure=sluice.Fallback(rate=10, per=3600), clock=lambda: 0.0)
    got = [c.reserve("llm:acme", 4, rate=100) for _ in range(3)]
    assert [r.allowed for r in got] == [True, True, False]
    assert got[2].remaining == 2 and got[2].source == "fallback"
