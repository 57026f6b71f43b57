"""The synchronous sluice client, over redis-py."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import redis
import redis.exceptions

from ._core import TRANSIENT_REPLIES, Call, Calls, Decision, Failure, Held, Policy, Unavailable, monotonic, seconds
from ._nodes import Addr, Nodes, Resolver, fmt, members, refreshes, resolve, seeds_of


class Client(Calls):
    """Asks sluice whether calls may go ahead, within a deadline, and decides
    by the failure policy when it cannot.

    Where: ``nodes``, a list of ``"host:port"`` strings (or one string,
    commas between nodes; a host name stands for every address it
    resolves to), else ``host`` and ``port`` (a name resolving to several
    addresses is several nodes), else ``redis_client``, a ``redis.Redis``
    (its pool is used, one connection per call). Other keyword arguments
    go to each node's ``redis.Redis``, with ``timeout`` as its connect and
    socket timeouts. ``timeout`` (seconds, default 0.05) bounds each call:
    a reply that has not come by then counts as a failure.

    With several nodes (or ``discover=True``) the client learns the
    cluster's members from ``RL.CLUSTER NODES`` after its first answer and
    every ``refresh`` seconds (30), in the background. A call goes to the
    node that answered last; on a connection error (refused, reset,
    closed), ``LOADING``, ``TRYAGAIN`` or ``CLUSTERDOWN`` it tries the
    next node within the same deadline, and a node that failed is tried
    last for ``breaker_cooldown`` seconds.

    ``failure`` is ``"open"`` (the default), ``"closed"`` or a
    :class:`Fallback` limit; it decides when no node answers within the
    deadline. Any other error reply raises :class:`SluiceError`.
    """

    def __init__(self, redis_client: Optional[redis.Redis] = None, *, nodes: Any = None,
                 host: str = "127.0.0.1", port: int = 6380, timeout: Any = 0.05, failure: Failure = "open",
                 breaker_failures: int = 3, breaker_cooldown: Any = 1.0,
                 denial_cache_size: int = 10000, clock: Callable[[], float] = monotonic,
                 discover: Optional[bool] = None, refresh: Any = 30.0, resolver: Optional[Resolver] = None,
                 **redis_kwargs: Any):
        self.timeout = seconds(timeout, "timeout")
        if self.timeout <= 0:
            raise ValueError("timeout must be above 0")
        self.policy = Policy(failure, breaker_failures, breaker_cooldown, denial_cache_size, clock)
        self._clients: Dict[Addr, redis.Redis] = {}
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
            redis_kwargs.setdefault("socket_timeout", self.timeout)
            redis_kwargs.setdefault("socket_connect_timeout", self.timeout)
            self._kwargs = redis_kwargs
            # TLS checks the certificate against the name: a name stays one node.
            res = None if redis_kwargs.get("ssl") else (resolver or resolve)
            seeds = seeds_of(nodes, host, port)
            self.nodes = Nodes(seeds, res, False, refreshes(refresh), self.policy.breaker.cooldown, clock)
            self.nodes.discover = discover if discover is not None else (nodes is not None or len(self.nodes) > 1)
            if self.nodes.discover:
                self.nodes._next_refresh = 0.0
            self.redis = self._client(self.nodes.order()[0])

    def _client(self, a: Addr) -> redis.Redis:
        r = self._clients.get(a)
        if r is None:
            r = self._clients.setdefault(a, redis.Redis(host=a[0], port=a[1], **self._kwargs))
        return r

    @property
    def node_addrs(self) -> List[str]:
        """The nodes this client may ask, as "host:port"."""
        return [fmt(a) for a in self.nodes.addrs]

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
        """Sends one command to the first node of the client's order that
        answers, all within the deadline; a node that cannot be reached
        (or answers LOADING, TRYAGAIN, CLUSTERDOWN) hands the call to the
        next. Raises the last node's error when none answered."""
        deadline = time.monotonic() + budget
        err: Optional[BaseException] = None
        for i, a in enumerate(self.nodes.order()):
            if i and time.monotonic() >= deadline:
                break
            try:
                reply = self._call_node(a, args, deadline, budget)
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

    def _call_node(self, a: Addr, args: list, deadline: float, budget: float) -> Any:
        """One command on a connection of a's pool, its reply awaited until
        the deadline; a connection that missed it is closed (a late reply
        would answer the next command)."""
        pool = self._client(a).connection_pool
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

    def _refresh_if_due(self) -> None:
        if self.nodes.refresh_due():
            threading.Thread(target=self.refresh_nodes, name="sluice-nodes", daemon=True).start()

    def refresh_nodes(self) -> List[str]:
        """Learns the cluster's members now (``RL.CLUSTER NODES`` from the
        first node that answers; the seeds' names resolved again) and
        returns the nodes. The client does this in the background after
        its first answer, every ``refresh`` seconds, and soon after a node
        fails; a node that refuses the command (an ACL without it) leaves
        the seeds."""
        found = None
        try:
            seeds = self.nodes.resolved_seeds()
        except Exception:
            seeds = None
        try:
            for a in self.nodes.order():
                budget = max(self.timeout, 1.0)
                try:
                    found = members(self._call_node(a, ["RL.CLUSTER", "NODES"], time.monotonic() + budget, budget))
                    break
                except redis.exceptions.ResponseError:
                    break
                except Exception:
                    continue
        finally:
            self.nodes.done(found, seeds)
        return self.node_addrs

    def close(self) -> None:
        for r in list(self._clients.values()):
            r.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Client"]
