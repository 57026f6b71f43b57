"""sluice: a client for the sluice rate-limit server, HTTP middleware that
applies its decisions, and a cooperative HTTP client that follows the
rate-limit headers of the APIs it calls.

- :class:`Client` (sync, redis-py) and :class:`AsyncClient` (asyncio) ask
  sluice with a deadline, decide by a failure policy when it cannot answer,
  open a circuit breaker after repeated failures and remember denials until
  their retry_after; ``reserve``, ``settle``, ``release`` and ``renew``
  (and the ``reservation`` context manager) hold an estimate for work whose
  cost is known afterwards.
  Given several nodes (``nodes=[...]`` or a DNS name) they learn the
  cluster from ``RL.CLUSTER NODES`` and fail over within the deadline.
- :func:`parse_limit`: "10/minute", "5 per second", "100/hour" as sluice's
  RATE/PER/BURST (:mod:`sluice.rate`).
- :mod:`sluice.middleware`: WSGI and ASGI middleware (SPEC's headers, 429).
- :mod:`sluice.starlette` and :mod:`sluice.fastapi`: a per-route
  decorator, a FastAPI dependency and a Starlette middleware;
  :mod:`sluice.flask`: a Flask extension.
- :mod:`sluice.cooperative`: a ``requests`` adapter and an ``httpx``
  transport that pace requests by the server's headers.
"""

from ._core import (Algo, AsyncHeld, CircuitOpen, Decision, Fallback, Held, NoReservation, Reservation, SluiceError,
                    Unavailable)
from .aio import AsyncClient
from .client import Client
from .rate import Limit, parse_limit

__all__ = ["Algo", "AsyncClient", "AsyncHeld", "CircuitOpen", "Client", "Decision", "Fallback", "Held", "Limit",
           "NoReservation", "Reservation", "SluiceError", "Unavailable", "parse_limit"]
__version__ = "0.2.0"
