"""The synchronous sluice client, over redis-py."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Optional

import redis
import redis.exceptions

from ._core import Call, Calls, Decision, Failure, Held, Policy, Unavailable, monotonic, seconds


class Client(Calls):
    """Asks sluice whether calls may go ahead, within a deadline, and decides
    by the failure policy when it cannot.

    ``redis_client`` is a ``redis.Redis`` (its pool is used, one connection per
    call); without one, a client is built from ``host``, ``port`` and the
    other keyword arguments, with ``timeout`` as its connect and socket
    timeouts. ``timeout`` (seconds, default 0.05) bounds each call: a reply
    that has not come by then counts as a failure. ``failure`` is ``"open"``
    (the default), ``"closed"`` or a :class:`Fallback` limit; it decides
    when sluice cannot be reached, times out, or answers LOADING, TRYAGAIN or
    CLUSTERDOWN. Any other error reply raises :class:`SluiceError`.
    """

    def __init__(self, redis_client: Optional[redis.Redis] = None, *, host: str = "127.0.0.1",
                 port: int = 6380, timeout: Any = 0.05, failure: Failure = "open",
                 breaker_failures: int = 3, breaker_cooldown: Any = 1.0,
                 denial_cache_size: int = 10000, clock: Callable[[], float] = monotonic,
                 **redis_kwargs: Any):
        self.timeout = seconds(timeout, "timeout")
        if self.timeout <= 0:
            raise ValueError("timeout must be above 0")
        if redis_client is None:
            redis_kwargs.setdefault("socket_timeout", self.timeout)
            redis_kwargs.setdefault("socket_connect_timeout", self.timeout)
            redis_client = redis.Redis(host=host, port=port, **redis_kwargs)
        self.redis = redis_client
        self.policy = Policy(failure, breaker_failures, breaker_cooldown, denial_cache_size, clock)

    def _decide(self, c: Call, wait: Any) -> Decision:
        d = self.policy.before(c)
        if d is not None:
            return d
        try:
            reply = self._call(c.args, self.timeout + (seconds(wait, "wait") if wait is not None else 0))
        except Exception as e:
            return self.policy.failed(c, e)
        return self.policy.answered(c, reply)

    @contextlib.contextmanager
    def reservation(self, target: str, estimate: int, **kw: Any) -> Iterator[Held]:
        """:meth:`reserve` (same arguments) for a ``with`` block, which gets a
        :class:`Held`: test it (``if not r:`` refused), run the work, then
        ``r.settle(actual)``. A block left without settle or release, by an
        exception or not, releases the reservation; if sluice cannot be
        asked then, it expires after its TTL, charged at its estimate."""
        h = Held(self, self.reserve(target, estimate, **kw))
        try:
            yield h
        finally:
            if not h.ended:
                try:
                    self.release(h.reservation)
                except Unavailable:
                    pass

    def _strict(self, c: Call) -> Any:
        self.policy.strict_before()
        try:
            reply = self._call(c.args, self.timeout)
        except Exception as e:
            self.policy.strict_failed(e)
        self.policy.breaker.success()
        return c.convert(reply)

    def _call(self, args: list, budget: float) -> Any:
        """Sends one command on a connection of the pool and waits for its
        reply until the deadline; a connection that missed it is closed (a
        late reply would answer the next command)."""
        deadline = time.monotonic() + budget
        pool = self.redis.connection_pool
        conn = pool.get_connection(args[0])
        ok = False
        try:
            conn.send_command(*args)
            left = deadline - time.monotonic()
            if left <= 0 or not conn.can_read(timeout=left):
                raise redis.exceptions.TimeoutError(f"no reply within {budget * 1000:.0f} ms")
            reply = conn.read_response()
            ok = True
            return reply
        except redis.exceptions.ResponseError:
            ok = True
            raise
        finally:
            if not ok:
                conn.disconnect()
            pool.release(conn)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Client"]
