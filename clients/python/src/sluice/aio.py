"""The asyncio sluice client, over redis.asyncio; the same calls as
:class:`sluice.Client`, awaited."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, AsyncIterator, Callable, Optional

import redis.asyncio
import redis.exceptions

from ._core import AsyncHeld, Call, Calls, Decision, Failure, Policy, Unavailable, monotonic, seconds


class AsyncClient(Calls):
    """:class:`sluice.Client` for asyncio: every call is a coroutine. Takes a
    ``redis.asyncio.Redis`` or builds one from ``host`` and ``port``."""

    def __init__(self, redis_client: Optional["redis.asyncio.Redis"] = None, *, host: str = "127.0.0.1",
                 port: int = 6380, timeout: Any = 0.05, failure: Failure = "open",
                 breaker_failures: int = 3, breaker_cooldown: Any = 1.0,
                 denial_cache_size: int = 10000, clock: Callable[[], float] = monotonic,
                 **redis_kwargs: Any):
        self.timeout = seconds(timeout, "timeout")
        if self.timeout <= 0:
            raise ValueError("timeout must be above 0")
        if redis_client is None:
            redis_kwargs.setdefault("socket_connect_timeout", self.timeout)
            redis_client = redis.asyncio.Redis(host=host, port=port, **redis_kwargs)
        self.redis = redis_client
        self.policy = Policy(failure, breaker_failures, breaker_cooldown, denial_cache_size, clock)

    async def _decide(self, c: Call, wait: Any) -> Decision:
        d = self.policy.before(c)
        if d is not None:
            return d
        try:
            reply = await self._call(c.args, self.timeout + (seconds(wait, "wait") if wait is not None else 0))
        except Exception as e:
            return self.policy.failed(c, e)
        return self.policy.answered(c, reply)

    async def _done(self, d: Any) -> Any:
        return d

    @contextlib.asynccontextmanager
    async def reservation(self, target: str, estimate: int, **kw: Any) -> AsyncIterator[AsyncHeld]:
        """:meth:`sluice.Client.reservation` for ``async with``; ``await
        r.settle(actual)``."""
        h = AsyncHeld(self, await self.reserve(target, estimate, **kw))
        try:
            yield h
        finally:
            if not h.ended:
                try:
                    await self.release(h.reservation)
                except Unavailable:
                    pass

    async def _strict(self, c: Call) -> Any:
        self.policy.strict_before()
        try:
            reply = await self._call(c.args, self.timeout)
        except Exception as e:
            self.policy.strict_failed(e)
        self.policy.breaker.success()
        return c.convert(reply)

    async def _call(self, args: list, budget: float) -> Any:
        pool = self.redis.connection_pool
        conn = None
        ok = False

        async def go() -> Any:
            nonlocal conn
            conn = await pool.get_connection(args[0])
            await conn.send_command(*args)
            return await conn.read_response()

        try:
            reply = await asyncio.wait_for(go(), budget)
            ok = True
            return reply
        except redis.exceptions.ResponseError:
            ok = True
            raise
        except asyncio.TimeoutError:
            raise redis.exceptions.TimeoutError(f"no reply within {budget * 1000:.0f} ms") from None
        finally:
            if conn is not None:
                if not ok:
                    await conn.disconnect()
                r = pool.release(conn)
                if inspect.isawaitable(r):
                    await r

    async def close(self) -> None:
        await self.redis.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
