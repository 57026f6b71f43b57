"""With sluice stopped or silent, a call decides by its failure policy
within its deadline, and the circuit breaker makes later calls cost next to
nothing."""

import asyncio
import time

import pytest

import sluice


@pytest.mark.parametrize("where", ["dead_port", "silent_port"])
@pytest.mark.parametrize("failure,source,allowed", [("open", "fail_open", True), ("closed", "fail_closed", False)])
def test_policy_within_deadline_then_breaker(request, where, failure, source, allowed):
    port = request.getfixturevalue(where)
    c = sluice.Client(port=port, failure=failure)  # the default deadline, 50 ms
    for i in range(c.policy.breaker.failures):
        t0 = time.perf_counter()
        d = c.acquire("user:1", rate=10)
        took = time.perf_counter() - t0
        assert (d.allowed, d.source) == (allowed, source)
        assert d.error is not None
        assert took < 0.1, f"call {i} took {took * 1000:.1f} ms"
    assert c.policy.breaker.state == "open"
    best = min(_thousand(c) for _ in range(5))  # the best of five: a loaded machine preempts
    assert best < 0.001, f"1000 calls with the breaker open took {best * 1000:.3f} ms"


def _thousand(c) -> float:
    t0 = time.perf_counter()
    for _ in range(1000):
        c.acquire("user:1", rate=10)
    return time.perf_counter() - t0


def test_fallback_limit_and_half_open(dead_port):
    now = [0.0]
    c = sluice.Client(port=dead_port, failure=sluice.Fallback(rate=2, per=1), breaker_cooldown=1.0,
                      clock=lambda: now[0])
    got = [c.acquire("k", rate=100) for _ in range(3)]
    assert [d.allowed for d in got] == [True, True, False]
    assert {d.source for d in got} == {"fallback"}
    assert got[2].retry_after == 500
    assert c.policy.breaker.state == "open"
    now[0] = 1.0
    assert c.policy.breaker.state == "half_open"
    c.acquire("k", rate=100)  # the probe, which fails
    assert c.policy.breaker.state == "open"


def test_breaker_closes_after_a_successful_probe(server):
    now = [0.0]
    c = sluice.Client(port=server.resp, timeout=1.0, clock=lambda: now[0])
    for _ in range(3):
        c.policy.breaker.failure()
    assert c.acquire("probe", rate=10).source == "fail_open"
    now[0] = 1.5
    assert c.acquire("probe", rate=10).source == "server"
    assert c.policy.breaker.state == "closed"


def test_asyncio_deadline(silent_port):
    async def main():
        c = sluice.AsyncClient(port=silent_port, failure="closed")
        t0 = time.perf_counter()
        d = await c.acquire("k", rate=1)
        assert d.source == "fail_closed" and time.perf_counter() - t0 < 0.1
        for _ in range(2):
            await c.acquire("k", rate=1)
        assert c.policy.breaker.state == "open"

    asyncio.run(main())
