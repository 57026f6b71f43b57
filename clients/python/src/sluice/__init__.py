"""sluice: a client for the sluice rate-limit server, HTTP middleware that
applies its decisions, and a cooperative HTTP client that follows the
rate-limit headers of the APIs it calls.

- :class:`Client` (sync, redis-py) and :class:`AsyncClient` (asyncio) ask
  sluice with a deadline, decide by a failure policy when it cannot answer,
  open a circuit breaker after repeated failures and remember denials until
  their retry_after; ``reserve``, ``settle``, ``release`` and ``renew``
  (and the ``reservation`` context manager) hold an estimate for work whose
  cost is known afterwards.
- :mod:`sluice.middleware`: WSGI and ASGI middleware (SPEC's headers, 429).
- :mod:`sluice.cooperative`: a ``requests`` adapter and an ``httpx``
  transport that pace requests by the server's headers.
"""

from ._core import (Algo, AsyncHeld, CircuitOpen, Decision, Fallback, Held, NoReservation, Reservation, SluiceError,
                    Unavailable)
from .aio import AsyncClient
from .client import Client

__all__ = ["Algo", "AsyncClient", "AsyncHeld", "CircuitOpen", "Client", "Decision", "Fallback", "Held", "NoReservation",
           "Reservation", "SluiceError", "Unavailable"]
__version__ = "0.2.0"
