"""The asyncio sluice client, over redis.asyncio; the same calls as
:class:`sluice.Client`, awaited."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Set

import redis.asyncio
import redis.exceptions

from ._core import TRANSIENT_REPLIES, AsyncHeld, Call, Calls, Decision, Failure, Policy, Unavailable, monotonic, seconds
from ._nodes import Addr, Nodes, Resolver, fmt, members, refreshes, resolve, seeds_of


class AsyncClient(Calls):
    """:class:`sluice.Client` for asyncio: every call is a coroutine. Takes
    ``nodes``, ``host`` and ``port``, or a ``redis.asyncio.Redis``; several
    nodes fail over and learn the cluster as :class:`sluice.Client`'s do
    (the refresh is a task of the running loop)."""

    def __init__(self, redis_client: Optional["redis.asyncio.Redis"] = None, *, nodes: Any = None,
                 host: str = "127.0.0.1", port: int = 6380, timeout: Any = 0.05, failure: Failure = "open",
                 breaker_failures: int = 3, breaker_cooldown: Any = 1.0,
                 denial_cache_size: int = 10000, clock: Callable[[], float] = monotonic,
                 discover: Optional[bool] = None, refresh: Any = 30.0, resolver: Optional[Resolver] = None,
                 **redis_kwargs: Any):
        self.timeout = seconds(timeout, "timeout")
        if self.timeout <= 0:
            raise ValueError("timeout must be above 0")
        self.policy = Policy(failure, breaker_failures, breaker_cooldown, denial_cache_size, clock)
        self._clients: Dict[Addr, "redis.asyncio.Redis"] = {}
        self._tasks: Set["asyncio.Future[Any]"] = set()
        if redis_client is not None:
            if nodes is not None or discover:
                raise TypeError("redis_client is one node: give nodes (and discover) instead")
            kw = redis_client.connection_pool.connection_kwargs
            seed = (str(kw.get("host", host)), int(kw.get("port", port)))
            self.nodes = Nodes([seed], None, False, refreshes(refresh),
                               self.policy.breaker.cooldown, clock)
            self._clients[seed] = redis_client
            self.redis = redis_client
        else:
            redis_kwargs.setdefault("socket_connect_timeout", self.timeout)
            self._kwargs = redis_kwargs
            res = None if redis_kwargs.get("ssl") else (resolver or resolve)
            self.nodes = Nodes(seeds_of(nodes, host, port), res, False, refreshes(refresh),
                               self.policy.breaker.cooldown, clock)
            self.nodes.discover = discover if discover is not None else (nodes is not None or len(self.nodes) > 1)
            if self.nodes.discover:
                self.nodes._next_refresh = 0.0
            self.redis = self._client(self.nodes.order()[0])

    def _client(self, a: Addr) -> "redis.asyncio.Redis":
        r = self._clients.get(a)
        if r is None:
            r = self._clients.setdefault(a, redis.asyncio.Redis(host=a[0], port=a[1], **self._kwargs))
        return r

    @property
    def node_addrs(self) -> List[str]:
        """The nodes this client may ask, as "host:port"."""
        return [fmt(a) for a in self.nodes.addrs]

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
        """:meth:`sluice.Client._call`: the nodes in order, within one deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        err: Optional[BaseException] = None
        for i, a in enumerate(self.nodes.order()):
            left = deadline - loop.time()
            if i and left <= 0:
                break
            try:
                reply = await self._call_node(a, args, max(left, 0.0), budget)
            except (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError):
                raise
            except redis.exceptions.ResponseError as e:
                if not str(e).startswith(TRANSIENT_REPLIES):
                    self.nodes.answered(a)
                    raise
                err = e
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
                err = e
            else:
                self.nodes.answered(a)
                self._refresh_if_due()
                return reply
            self.nodes.failed(a)
        self._refresh_if_due()
        assert err is not None
        raise err

    async def _call_node(self, a: Addr, args: list, left: float, budget: float) -> Any:
        pool = self._client(a).connection_pool
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
            done, _ = await asyncio.wait({task}, timeout=left)
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

    def _refresh_if_due(self) -> None:
        if self.nodes.refresh_due():
            t = asyncio.ensure_future(self.refresh_nodes(True))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def refresh_nodes(self, _claimed: bool = False) -> List[str]:
        """:meth:`sluice.Client.refresh_nodes`, awaited."""
        if not _claimed:
            self.nodes._refreshing = True
        found = None
        seeds = None
        try:
            try:
                seeds = await asyncio.get_running_loop().run_in_executor(None, self.nodes.resolved_seeds)
            except Exception:
                seeds = None
            for a in self.nodes.order():
                try:
                    found = members(await self._call_node(a, ["RL.CLUSTER", "NODES"], max(self.timeout, 1.0),
                                                          max(self.timeout, 1.0)))
                    break
                except redis.exceptions.ResponseError:
                    break
                except Exception:
                    continue
        finally:
            self.nodes.done(found, seeds)
        return self.node_addrs

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for r in list(self._clients.values()):
            await r.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
