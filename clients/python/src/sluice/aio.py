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

        async def go() -> Any:
            nonlocal conn
            conn = await pool.get_connection(args[0])
            await conn.send_command(*args)
            return await conn.read_response()

        async def give_back(broken: bool) -> None:
            if conn is None:
                return
            try:
                if broken:
                    await conn.disconnect()
            finally:
                r = pool.release(conn)
                if inspect.isawaitable(r):
                    await r

        # The deadline does not wait for the call to end: a library that
        # swallows the cancellation (redis-py 4.3's asyncio reader can)
        # would otherwise hold the caller past it. A call cut off drops its
        # connection once it does end.
        task = asyncio.ensure_future(go())
        try:
            done, _ = await asyncio.wait({task}, timeout=budget)
        except asyncio.CancelledError:
            task.cancel()
            task.add_done_callback(lambda t: asyncio.ensure_future(give_back(True)))
            raise
        if not done:
            task.cancel()

            def ended(t: "asyncio.Future[Any]") -> None:
                if not t.cancelled():
                    t.exception()  # a late failure is nobody's: mark it seen
                asyncio.ensure_future(give_back(True))

            task.add_done_callback(ended)
            raise redis.exceptions.TimeoutError(f"no reply within {budget * 1000:.0f} ms")
        try:
            reply = task.result()
        except redis.exceptions.ResponseError:
            await give_back(False)
            raise
        except BaseException:
            await give_back(True)
            raise
        await give_back(False)
        return reply

    async def close(self) -> None:
        await self.redis.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
