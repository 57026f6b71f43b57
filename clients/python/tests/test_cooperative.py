"""The cooperative client against sluice's own HTTP API (POST /v1/acquire,
which answers with the headers of SPEC §10 and 429 when refused): sending
as fast as the pacing allows, it is never refused and gets at least 90 %
of what the limit admits."""

import concurrent.futures
import multiprocessing
import time
import uuid

import httpx
import pytest
import requests

from sluice.cooperative import CooperativeAdapter, CooperativeTransport, Pacer, RateLimited

RATE, SECONDS = 10, 30


def run(send, duration: float) -> dict:
    got = {"ok": 0, "refused": 0, "start": time.monotonic()}
    while time.monotonic() - got["start"] < duration:
        status = send()
        got["ok" if status == 200 else "refused"] += 1
        assert status in (200, 429), status
    got["elapsed"] = time.monotonic() - got["start"]
    return got


def with_requests(url: str) -> dict:
    s = requests.Session()
    s.mount("http://", CooperativeAdapter(max_wait=5))
    body = {"key": "coop:" + uuid.uuid4().hex[:8], "rate": RATE, "burst": RATE}
    return run(lambda: s.post(url, json=body, timeout=5).status_code, SECONDS)


def with_httpx(url: str) -> dict:
    c = httpx.Client(transport=CooperativeTransport(max_wait=5), timeout=5)
    body = {"key": "coop:" + uuid.uuid4().hex[:8], "rate": RATE, "burst": RATE}
    return run(lambda: c.post(url, json=body).status_code, SECONDS)


def test_never_refused_and_90_percent(server):
    url = f"http://127.0.0.1:{server.http}/v1/acquire"
    # One process each, side by side: 30 s, not 60, and no shared GIL.
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as ex:
        futures = {name: ex.submit(f, url) for name, f in (("requests", with_requests), ("httpx", with_httpx))}
        results = {name: f.result() for name, f in futures.items()}
    for name, got in results.items():
        allowed = RATE + RATE * got["elapsed"]  # the burst, then the rate
        print(f"{name}: {got['ok']} admitted of {allowed:.0f} allowed, {got['refused']} refused")
        assert got["refused"] == 0, f"{name}: refused {got['refused']} times"
        assert got["ok"] >= 0.9 * allowed, f"{name}: {got['ok']} of {allowed:.0f}"


def test_fail_fast_and_retry_after(server):
    url = f"http://127.0.0.1:{server.http}/v1/acquire"
    body = {"key": "ff:" + uuid.uuid4().hex[:8], "rate": 1, "per": "minute", "burst": 1}
    s = requests.Session()
    s.mount("http://", CooperativeAdapter(max_wait=0))
    assert s.post(url, json=body).status_code == 200
    with pytest.raises(RateLimited) as e:  # remaining 0: the pacer knows before asking
        s.post(url, json=body)
    assert 55 < e.value.retry_after <= 60

    # A client that ignored the headers got a 429: its Retry-After is waited out.
    plain = requests.post(url, json=body)
    assert plain.status_code == 429
    p = Pacer(max_wait=0, jitter=0.1)
    p.update("h", 429, plain.headers)
    with pytest.raises(RateLimited) as e:
        p.reserve("h")
    assert 60 <= e.value.retry_after <= 66 + 1


def paced(headers: dict, n: int) -> list:
    now = [0.0]
    p = Pacer(clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    p.reserve("api")
    p.update("api", 200, headers)
    times = []
    for _ in range(n):
        p.acquire("api", max_wait=100)
        times.append(round(now[0], 6))
    return times


def test_pacing_spreads_remaining_over_reset():
    # No policy: r=3 spread over the 40 s to reset, then the reset.
    assert paced({"RateLimit": '"hour";r=3;t=40'}, 4) == [10.0, 20.0, 30.0, 40.0]
    assert paced({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30"}, 2) == [15.0, 30.0]


def test_pacing_follows_the_policy():
    # 10 per 2 s: the 2 left go at once, then one every 0.2 s.
    h = {"RateLimit-Policy": '"burst";q=10;w=2', "RateLimit": '"burst";r=2;t=2'}
    assert paced(h, 4) == [0.0, 0.0, 0.2, 0.4]
