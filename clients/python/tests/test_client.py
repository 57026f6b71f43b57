import asyncio
import uuid

import pytest

import sluice


def uniq(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:8]}"


def test_inline_budget_peek_refund_throttle(server):
    c = sluice_client(server)
    k = uniq("user")
    d = c.acquire(k, rate=10, per="second", burst=10)
    assert (d.allowed, d.remaining, d.limit, d.retry_after, d.limited_by, d.source) == (True, 9, 10, 0, k, "server")
    assert 0 < d.reset_after <= 100
    d = c.acquire(k, rate=10, per=1, burst=10, cost=9)
    assert d.allowed and d.remaining == 0
    d = c.acquire(k, rate=10, burst=10)
    assert not d.allowed and d.retry_after > 0 and d.source == "server"
    assert c.peek(k, rate=10, burst=10, cost=0).remaining == 0
    assert c.refund(k, 5, rate=10, burst=10).remaining >= 5
    assert c.acquire(k, rate=10, burst=10).allowed  # the refund dropped the cached denial
    assert c.acquire(k, rate=10, burst=10, cost=50).retry_after == -1

    server.redis.execute_command("RL.BUDGET", "SET", "pyt/api", "RATE", 100, "PER", "minute", "SCOPE", "user")
    d = c.acquire_budget("pyt/api", key="alice", cost=5)
    assert (d.allowed, d.remaining, d.limit, d.limited_by) == (True, 95, 100, "pyt/api#alice")
    assert c.peek_budget("pyt/api", key="alice", cost=0).remaining == 95

    t = uniq("thr")
    d = c.throttle(t, 1, 1, 60)
    assert (d.allowed, d.limit, d.remaining, d.retry_after) == (True, 2, 1, 0)
    c.throttle(t, 1, 1, 60)
    d = c.throttle(t, 1, 1, 60)
    assert not d.allowed and 59000 <= d.retry_after <= 60000


def test_error_replies_raise(server):
    c = sluice_client(server)
    with pytest.raises(sluice.SluiceError) as e:
        c.acquire_budget("nosuch/path")
    assert e.value.code == "NOBUDGET"
    with pytest.raises(sluice.SluiceError) as e:
        c.acquire("k", rate=0)
    assert e.value.code == "ERR"
    assert c.policy.breaker.state == "closed"  # an answer, however unwelcome


def test_asyncio_client(server):
    async def main():
        async with sluice.AsyncClient(port=server.resp) as c:
            k = uniq("async")
            d = await c.acquire(k, rate=2, burst=2, cost=2)
            assert d.allowed and d.remaining == 0
            d = await c.acquire(k, rate=2, burst=2)
            assert not d.allowed and d.source == "server"
            d = await c.acquire(k, rate=2, burst=2)
            assert not d.allowed and d.source == "cache"
            with pytest.raises(sluice.SluiceError):
                await c.acquire_budget("nosuch/path")

    asyncio.run(main())



def sluice_client(srv, **kw):
    return sluice.Client(port=srv.resp, timeout=kw.pop("timeout", 1.0), **kw)
