"""Limit strings: what each form maps to, that the server reads the mapping
as the string means, and clear errors for what cannot be read."""

import uuid

import pytest

import sluice
from sluice.rate import parse_limit


@pytest.mark.parametrize("text,rate,per,burst,window", [
    ("10/minute", 10, "minute", 10, 60),
    ("5 per second", 5, "second", 5, 1),
    ("100/hour", 100, "hour", 100, 3600),
    ("1000/day", 1000, "day", 1000, 86400),
    ("7 / week", 7, "week", 7, 604800),
    ("20/5 minutes", 20, "5m", 20, 300),
    ("3 per 2 h", 3, "2h", 3, 7200),
    ("1/250ms", 1, "250ms", 1, 0.25),
    ("10/30s", 10, "30s", 10, 30),
    ("100/Minute burst 20", 100, "minute", 20, 60),
    ("1 PER 1 SECOND", 1, "second", 1, 1),
])
def test_forms(text, rate, per, burst, window):
    lim = parse_limit(text)
    assert (lim.rate, lim.per, lim.burst, lim.window, lim.algo) == (rate, per, burst, window, None)
    assert lim.kwargs() == dict(rate=rate, per=per, burst=burst)


@pytest.mark.parametrize("text,why", [
    ("10 a minute", "cannot read"),
    ("ten/minute", "cannot read"),
    ("10/", "cannot read"),
    ("10/fortnight", "unknown unit 'fortnight'"),
    ("10/month", "months and years have no fixed length"),
    ("10/minute;100/hour", "several limits"),
    ("0/second", "at least 1"),
    ("10/0 minutes", "at least 1"),
])
def test_errors_name_the_argument_and_the_forms(text, why):
    with pytest.raises(ValueError) as e:
        parse_limit(text, name="limit")
    msg = str(e.value)
    assert msg.startswith("limit: ") and why in msg
    if why in ("cannot read", "unknown unit 'fortnight'"):
        assert '"N/unit", "N per unit" or "N/M units"' in msg and '"10/minute"' in msg
    with pytest.raises(TypeError, match="limit must be a limit string"):
        parse_limit(10)  # type: ignore[arg-type]


def test_window_algorithms_refuse_a_burst():
    assert parse_limit("10/minute", "sliding_window").algo == "sliding_window"
    with pytest.raises(ValueError, match="burst must equal its rate"):
        parse_limit("10/minute burst 5", "fixed_window")


def test_the_server_reads_the_mapping(server):
    c = sluice.Client(port=server.resp, timeout=2.0)
    k = "rate:" + uuid.uuid4().hex[:8]
    lim = parse_limit("3/minute")
    got = [c.acquire(k, **lim.kwargs()) for _ in range(4)]
    assert [d.allowed for d in got] == [True, True, True, False]
    assert got[0].limit == 3 and got[0].remaining == 2
    assert 19000 <= got[3].retry_after <= 20000  # one token every 20 s
    # The window form: 2 per 5 minutes, counted in a sliding window.
    k2 = k + ":w"
    lim = parse_limit("2/5 minutes", "sliding_window")
    got = [c.acquire(k2, **lim.kwargs()) for _ in range(3)]
    assert [d.allowed for d in got] == [True, True, False] and got[0].limit == 2
    assert 0 < got[2].retry_after <= 2 * 300000  # the window ahead, weighted by this one
