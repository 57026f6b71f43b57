"""Rate-limit headers: writing them for a decision (SPEC §10, as sluice's
own HTTP fronts do) and reading them from any API's responses."""

from __future__ import annotations

import email.utils
import math
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, List, Mapping, Optional, Tuple

from ._core import Decision


def ceil_seconds(ms: float) -> int:
    return max(0, math.ceil(ms / 1000))


def rate_headers(d: Decision, window: Optional[float] = None) -> List[Tuple[str, str]]:
    """The headers of a decision, in the order RateLimit-Policy (only when the
    limit's window in seconds is known), RateLimit, X-RateLimit-Limit,
    -Remaining, -Reset; none when nothing limits (limit -1)."""
    if d.limit < 0:
        return []
    rem = 0 if d.degraded or d.remaining < 0 else d.remaining
    reset = str(ceil_seconds(d.reset_after))
    out = []
    if window:
        out.append(("RateLimit-Policy", f'"burst";q={d.limit};w={max(math.ceil(window), 1)}'))
    out += [("RateLimit", f'"burst";r={rem};t={reset}'), ("X-RateLimit-Limit", str(d.limit)),
            ("X-RateLimit-Remaining", str(rem)), ("X-RateLimit-Reset", reset)]
    return out


def retry_after(d: Decision) -> Optional[str]:
    """Retry-After for a refusal: whole seconds rounded up, at least 1; None
    when the call can never be admitted."""
    if d.retry_after < 0:
        return None
    return str(max(1, ceil_seconds(d.retry_after)))


def problem_429(d: Decision) -> bytes:
    """The body httplimit sends with a 429 (RFC 9457 problem+json)."""
    by = _json_str(d.limited_by)
    if d.retry_after < 0:
        detail = f"rate limit exceeded at {d.limited_by}; the request costs more than the limit's capacity and can never be admitted"
    else:
        detail = f"rate limit exceeded at {d.limited_by}; retry in {retry_after(d)} s"
    return ('{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,'
            f'"detail":{_json_str(detail)},"limited_by":{by},"retry_after_ms":{d.retry_after}}}\n').encode()


PROBLEM_503 = (b'{"type":"https://sluice.dev/problems/limiter-unavailable","title":"Service Unavailable",'
               b'"status":503,"detail":"rate limiting is unavailable; try again later"}\n')


def _json_str(s: str) -> str:
    import json
    return json.dumps(s, ensure_ascii=False)


# -- reading -------------------------------------------------------------


@dataclass
class Limit:
    """One limit a response described. ``name`` is the policy's name
    ("default" for headers that name none); ``quota`` and ``window``
    (seconds) come from the policy, ``remaining`` and ``reset`` (seconds)
    from the current state; each may be None."""

    name: str
    quota: Optional[float] = None
    window: Optional[float] = None
    remaining: Optional[float] = None
    reset: Optional[float] = None
    partition: str = ""


_ITEM = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^;,\s]+))((?:\s*;\s*[A-Za-z*][A-Za-z0-9_.*-]*(?:=(?:"(?:[^"\\]|\\.)*"|[^;,\s]*))?)*)\s*(?:,|$)')
_PARAM = re.compile(r';\s*([A-Za-z*][A-Za-z0-9_.*-]*)(?:=("(?:[^"\\]|\\.)*"|[^;,\s]*))?')


def _num(v: Optional[str]) -> Optional[float]:
    if v is None:
        return None
    try:
        return float(v.strip().strip('"'))
    except ValueError:
        return None


def parse_list(value: str) -> List[Tuple[str, dict]]:
    """A structured-field list (RFC 8941) of items with parameters, as
    (item, {param: value}); tolerant of what it does not understand."""
    out = []
    pos = 0
    value = value.strip()
    while pos < len(value):
        m = _ITEM.match(value, pos)
        if not m or m.end() == pos:
            break
        item = m.group(1) if m.group(1) is not None else m.group(2)
        params = {k.lower(): (v.strip('"') if v is not None else "") for k, v in _PARAM.findall(m.group(3) or "")}
        out.append((item, params))
        pos = m.end()
    return out


def _header(h: Mapping[str, str], name: str) -> Optional[str]:
    v = h.get(name)
    if v is None:
        v = h.get(name.lower())
    return v


def _reset_seconds(v: Optional[str], now: float) -> Optional[float]:
    n = _num(v)
    if n is None:
        return None
    if n > 1e9:  # a Unix time (GitHub's X-RateLimit-Reset), not a delta
        return max(0.0, n - now)
    return max(0.0, n)


def parse_limits(h: Mapping[str, str], now: Optional[float] = None) -> List[Limit]:
    """The limits a response's headers describe: the IETF draft's
    ``RateLimit-Policy`` and ``RateLimit`` (structured lists, ``q``/``w``
    and ``r``/``t``, by policy name), else its older ``RateLimit-Limit``,
    ``-Remaining``, ``-Reset`` (or ``RateLimit: limit=…, remaining=…,
    reset=…``), else ``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``.
    ``h`` is any case-insensitive mapping of header names."""
    now = time.time() if now is None else now
    limits: dict = {}

    def get(name: str, partition: str = "") -> Limit:
        k = (name, partition)
        if k not in limits:
            limits[k] = Limit(name, partition=partition)
        return limits[k]

    pol, cur = _header(h, "RateLimit-Policy"), _header(h, "RateLimit")
    if cur and re.match(r'\s*(limit|remaining|reset)\s*=', cur, re.I):
        # draft-07's dictionary: RateLimit: limit=10, remaining=9, reset=1
        d = {k.lower(): v for k, v in re.findall(r'(\w+)\s*=\s*([^,]+)', cur)}
        lim = get("default")
        lim.quota, lim.remaining, lim.reset = _num(d.get("limit")), _num(d.get("remaining")), _reset_seconds(d.get("reset"), now)
        cur = None
    if pol:
        for item, p in parse_list(pol):
            if item.replace(".", "", 1).isdigit():  # draft-03…07: RateLimit-Policy: 10;w=1
                lim = get("default")
                if lim.quota is None:
                    lim.quota, lim.window = _num(item), _num(p.get("w"))
                elif lim.window is None:
                    lim.window = _num(p.get("w"))
                continue
            lim = get(item, p.get("pk", ""))
            lim.quota, lim.window = _num(p.get("q")), _num(p.get("w"))
    if cur:
        for item, p in parse_list(cur):
            lim = get(item, p.get("pk", ""))
            lim.remaining, lim.reset = _num(p.get("r")), _reset_seconds(p.get("t"), now)
    if not any(l.remaining is not None for l in limits.values()):
        for prefix in ("RateLimit-", "X-RateLimit-"):
            rem = _header(h, prefix + "Remaining")
            if rem is None:
                continue
            lim = get("default")
            lim.remaining = _num(rem)
            lim.quota = lim.quota if lim.quota is not None else _num((_header(h, prefix + "Limit") or "").split(",")[0] or None)
            lim.reset = _reset_seconds(_header(h, prefix + "Reset"), now)
            break
    return [l for l in limits.values() if l.remaining is not None or l.quota is not None]


def parse_retry_after(v: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Retry-After in seconds: a number of seconds or an HTTP date."""
    if v is None:
        return None
    v = v.strip()
    n = _num(v)
    if n is not None:
        return max(0.0, n)
    try:
        t = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if t is None:
        return None
    return max(0.0, t.timestamp() - (time.time() if now is None else now))


Headers = Iterable[Tuple[str, str]]
HeaderSetter = Callable[[str, str], None]
