"""Limit strings as people write them ("10/minute", "5 per second",
"100/hour", "20/5 minutes", "100/minute burst 20") read into the inline
limit sluice takes: ``RATE n PER unit BURST b [ALGO a]``.

The mapping: ``"N/unit"`` is ``RATE N PER unit BURST N``. With the
default algorithm (a token bucket) that is a bucket of N tokens, refilled
at N per unit: a burst of at most N, and N per unit sustained. With
``algo="sliding_window"`` or ``"fixed_window"`` it is sluice's window
form: at most N in any window of that length (sliding), or in each
window (fixed; BURST must equal RATE there, so "burst" is refused).
``"N/M units"`` is ``PER <M><u>`` (``"20/5 minutes"`` → ``RATE 20 PER 5m``);
``"… burst B"`` sets ``BURST B``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from ._core import Algo

# unit word → (sluice's PER word for one unit, its duration suffix, seconds)
_UNITS = {}
for _names, _word, _suffix, _secs in (
        (("ms", "msec", "millisecond", "milliseconds"), None, "ms", 0.001),
        (("s", "sec", "secs", "second", "seconds"), "second", "s", 1),
        (("m", "min", "mins", "minute", "minutes"), "minute", "m", 60),
        (("h", "hr", "hrs", "hour", "hours"), "hour", "h", 3600),
        (("d", "day", "days"), "day", "d", 86400),
        (("w", "week", "weeks"), "week", "w", 604800)):
    for _n in _names:
        _UNITS[_n] = (_word, _suffix, _secs)

_FORM = re.compile(r"^\s*(\d+)\s*(?:/|\bper\b)\s*(\d+)?\s*([a-zA-Z]+)\s*(?:\bburst\s+(\d+))?\s*$", re.I)

FORMS = ('"N/unit", "N per unit" or "N/M units", optionally followed by "burst B"; units: ms, second, '
         'minute, hour, day, week (and their plurals and abbreviations s, sec, m, min, h, hr, d, w); '
         'for example "10/minute", "5 per second", "100/hour", "20/5 minutes", "100/minute burst 20"')

WINDOW_ALGOS = ("sliding_window", "fixed_window")


@dataclass(frozen=True)
class Limit:
    """An inline limit: ``rate`` tokens per ``per`` (a unit word or a
    duration such as "5m", as RL.ACQUIRE's PER takes it), a bucket of
    ``burst``, ``algo`` (None: the server's default). ``window`` is the
    length of ``per`` in seconds (RateLimit-Policy's ``w``)."""

    rate: int
    per: str
    burst: int
    window: float
    algo: Optional[Algo] = None
    text: str = ""

    def kwargs(self) -> Dict[str, Any]:
        """The arguments of :meth:`sluice.Client.acquire` for this limit."""
        kw: Dict[str, Any] = dict(rate=self.rate, per=self.per, burst=self.burst)
        if self.algo is not None:
            kw["algo"] = self.algo
        return kw

    def __str__(self) -> str:
        s = f"RATE {self.rate} PER {self.per} BURST {self.burst}"
        return s + (f" ALGO {self.algo}" if self.algo else "")


def parse_limit(text: str, algo: Optional[Algo] = None, *, name: str = "limit") -> Limit:
    """The :class:`Limit` a string describes (see the module's mapping).
    ``name`` is the argument the string came in, for the error: a
    ValueError naming it and the accepted forms."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a limit string ({FORMS}), not {text!r}")
    if ";" in text or "," in text:
        raise ValueError(f"{name}: {text!r} holds several limits; give one per string (stack the decorators "
                         f"for several)")
    m = _FORM.match(text)
    if not m:
        raise ValueError(f"{name}: cannot read {text!r}; give {FORMS}")
    n, count, unit, burst = int(m.group(1)), m.group(2), m.group(3).lower(), m.group(4)
    if unit in ("mo", "month", "months", "y", "yr", "year", "years"):
        raise ValueError(f"{name}: {text!r}: months and years have no fixed length; use a calendar quota "
                         f"(RL.ACQUIRE … QUOTA n PER month, a budget's QUOTA, or reserve(quota=…)), "
                         f"or days (\"10/30 days\")")
    if unit not in _UNITS:
        raise ValueError(f"{name}: {text!r} has an unknown unit {m.group(3)!r}; give {FORMS}")
    word, suffix, secs = _UNITS[unit]
    k = int(count) if count is not None else 1
    if n < 1 or k < 1:
        raise ValueError(f"{name}: {text!r}: the count and the period must be at least 1")
    per = word if k == 1 and word is not None else f"{k}{suffix}"
    b = int(burst) if burst is not None else n
    if b < 1:
        raise ValueError(f"{name}: {text!r}: burst must be at least 1")
    if algo in WINDOW_ALGOS and b != n:
        raise ValueError(f"{name}: {text!r}: {algo} counts RATE per window, so its burst must equal its rate")
    return Limit(rate=n, per=per, burst=b, window=k * secs, algo=algo, text=text.strip())


LimitLike = Union[str, Limit, Dict[str, Any]]


def as_limit(v: LimitLike, algo: Optional[Algo] = None, *, name: str = "limit") -> Limit:
    """A Limit from a string, a Limit, or a dict of acquire's arguments
    (rate, per, burst, algo)."""
    if isinstance(v, Limit):
        return v if algo is None else Limit(v.rate, v.per, v.burst, v.window, algo, v.text)
    if isinstance(v, dict):
        from .middleware import _window
        unknown = set(v) - {"rate", "per", "burst", "algo"}
        if unknown or "rate" not in v:
            raise ValueError(f"{name}: a dict limit takes rate (required), per, burst and algo; got {sorted(v)}")
        per = v.get("per", "second")
        per_s = per if isinstance(per, str) else None
        if per_s is None:
            from ._core import per_arg
            per_s = per_arg(per)
        a = v.get("algo", algo)
        return Limit(int(v["rate"]), per_s, int(v.get("burst", v["rate"])), _window(dict(per=per), None) or 0.0,
                     a, "")
    return parse_limit(v, algo, name=name)
