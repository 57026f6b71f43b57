"""The nodes a client may ask: the seeds it was given (host:port strings,
a DNS name's addresses), the members ``RL.CLUSTER NODES`` lists, which
one answered last, and which failed lately. Shared by the sync and
asyncio clients; no I/O of its own but the DNS look-up of the seeds."""

from __future__ import annotations

import ipaddress
import random
import socket
import threading
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

Addr = Tuple[str, int]
NodeSpec = Union[str, Tuple[str, int]]
Resolver = Callable[[str, int], List[str]]


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def parse_addr(spec: Any, default_port: int) -> Addr:
    """("host", port) from "host:port", "[v6]:port", "host" (the default
    port) or a (host, port) pair; ValueError naming what is accepted."""
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str):
        host, port = spec[0], spec[1]
    elif isinstance(spec, str) and spec.strip():
        s = spec.strip()
        if s.startswith("["):  # [::1]:6380 or [::1]
            end = s.find("]")
            if end < 0:
                raise ValueError(f"nodes: {spec!r} opens '[' without closing it; give \"host:port\" or \"[v6]:port\"")
            host, rest = s[1:end], s[end + 1:]
            if rest and not rest.startswith(":"):
                raise ValueError(f"nodes: {spec!r} is not \"[v6]:port\"")
            port = rest[1:] if rest else default_port
        elif s.count(":") == 1:
            host, port = s.split(":")
        elif ":" in s:  # a bare IPv6 address
            host, port = s, default_port
        else:
            host, port = s, default_port
    else:
        raise ValueError(f'nodes: each node is "host:port", "host" or a (host, port) pair, not {spec!r}')
    try:
        p = int(port)
    except (TypeError, ValueError):
        p = -1
    if not host or not 0 < p < 65536:
        raise ValueError(f'nodes: {spec!r} needs a host and a port from 1 to 65535 ("host:port")')
    return host, p


def resolve(host: str, port: int) -> List[str]:
    """The addresses a name resolves to, in the resolver's order, each once."""
    out: List[str] = []
    for *_, sa in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sa[0] not in out:
            out.append(sa[0])
    return out


def fmt(a: Addr) -> str:
    return f"[{a[0]}]:{a[1]}" if ":" in a[0] else f"{a[0]}:{a[1]}"


def expand(seeds: Sequence[Addr], resolver: Optional[Resolver]) -> List[Addr]:
    """Each seed whose host is a name resolving to several addresses, as
    one node per address; a name with one address (or none yet) stays a
    name, which the connection resolves again whenever it dials, so a
    moved server is found. resolver None: no expansion."""
    out: List[Addr] = []
    for host, port in seeds:
        addrs = [host]
        if resolver is not None and not is_ip(host):
            try:
                addrs = resolver(host, port) or [host]
            except (OSError, UnicodeError):
                addrs = [host]
            if len(addrs) < 2:
                addrs = [host]
        for h in addrs:
            if (h, port) not in out:
                out.append((h, port))
    return out


def members(reply: Any) -> List[Tuple[Addr, bool]]:
    """RL.CLUSTER NODES as ((host, port), reachable) per member with a
    usable RESP address (an unspecified one, 0.0.0.0 or ::, is skipped)."""
    out: List[Tuple[Addr, bool]] = []
    if not isinstance(reply, (list, tuple)):
        return out
    for m in reply:
        if not isinstance(m, (list, tuple)) or len(m) < 2:
            continue
        resp = m[1].decode() if isinstance(m[1], (bytes, bytearray)) else str(m[1])
        role = m[4] if len(m) > 4 else b""
        role = role.decode() if isinstance(role, (bytes, bytearray)) else str(role)
        try:
            a = parse_addr(resp, 0)
        except ValueError:
            continue
        if a[0] in ("0.0.0.0", "::", ""):
            continue
        out.append((a, role != "unreachable"))
    return out


class Nodes:
    """The client's nodes and its preference among them. A call tries the
    node that answered last, then the others that have not failed lately,
    then those that have (within the call's deadline); a node that failed
    is tried last for ``cooldown`` seconds."""

    def __init__(self, seeds: Sequence[Addr], resolver: Optional[Resolver], discover: bool,
                 refresh: float, cooldown: float, clock: Callable[[], float]):
        self.seeds = list(seeds)
        self.resolver = resolver
        self.discover = discover
        self.refresh_every = refresh
        self.cooldown = cooldown
        self.clock = clock
        self._lock = threading.Lock()
        self._seed_addrs: List[Addr] = expand(self.seeds, resolver)
        self._members: List[Addr] = []
        self.addrs: List[Addr] = list(self._seed_addrs)
        self._down: dict = {}
        self._current = self.addrs[random.randrange(len(self.addrs))] if self.addrs else None
        self._next_refresh = 0.0 if discover else float("inf")
        self._last_refresh = float("-inf")
        self._refreshing = False

    def __len__(self) -> int:
        return len(self.addrs)

    def order(self) -> List[Addr]:
        """The nodes to try for one call, in order."""
        if len(self.addrs) == 1:
            return self.addrs
        with self._lock:
            now = self.clock()
            cur = self._current
            rest = [a for a in self.addrs if a != cur]
            up = [a for a in rest if self._down.get(a, 0) <= now]
            down = sorted((a for a in rest if self._down.get(a, 0) > now), key=lambda a: self._down[a])
            first = [cur] if cur in self.addrs else []
            if first and self._down.get(cur, 0) > now:
                down.insert(0, first.pop())
            return first + up + down

    def answered(self, a: Addr) -> None:
        with self._lock:
            self._current = a
            self._down.pop(a, None)

    def failed(self, a: Addr) -> None:
        """a did not answer: try it last for a while, and learn the
        topology again soon."""
        with self._lock:
            self._down[a] = self.clock() + self.cooldown
            if self._current == a:
                self._current = None
            if self.discover:  # soon, but not at every failing call
                now = self.clock()
                self._next_refresh = min(self._next_refresh, max(now, self._last_refresh + self.cooldown))

    def refresh_due(self) -> bool:
        """Whether to learn the topology now; True once until done()."""
        if not self.discover or self._refreshing or self.clock() < self._next_refresh:
            return False
        with self._lock:
            if self._refreshing:
                return False
            self._refreshing = True
            return True

    def done(self, found: Optional[Iterable[Tuple[Addr, bool]]], seeds: Optional[List[Addr]] = None) -> None:
        """The end of a refresh: found is RL.CLUSTER NODES' members (None:
        no node told), seeds the seeds resolved again (None: as before).
        The nodes become the seeds' addresses and the members; a member
        the answering node sees unreachable counts as failed."""
        with self._lock:
            self._refreshing = False
            self._last_refresh = self.clock()
            self._next_refresh = self._last_refresh + self.refresh_every
            if seeds:
                self._seed_addrs = list(seeds)
            if found is not None:
                self._members = []
                now = self.clock()
                for a, reachable in found:
                    if a not in self._members:
                        self._members.append(a)
                    if not reachable and self._down.get(a, 0) <= now:
                        self._down[a] = now + self.cooldown
            addrs = list(self._seed_addrs)
            addrs += [a for a in self._members if a not in addrs]
            if addrs:
                self.addrs = addrs
                self._down = {a: t for a, t in self._down.items() if a in addrs}

    def resolved_seeds(self) -> Optional[List[Addr]]:
        """The seeds resolved again (blocking DNS; the sync client's
        refresh thread calls it), or None when none is a name."""
        if self.resolver is None or all(is_ip(h) for h, _ in self.seeds):
            return None
        return expand(self.seeds, self.resolver)



def seeds_of(nodes: Any, host: str, port: int) -> List[Addr]:
    """The seeds of a client: ``nodes`` (a list of "host:port" strings or
    (host, port) pairs, or one string, commas separating several), else
    ``host`` and ``port``."""
    if nodes is None:
        return [parse_addr((host, port), port)]
    if isinstance(nodes, str):
        items: list = [s for s in nodes.split(",") if s.strip()]
    elif isinstance(nodes, (tuple, list)) and len(nodes) == 2 and isinstance(nodes[0], str) \
            and isinstance(nodes[1], int):
        items = [tuple(nodes)]
    else:
        try:
            items = list(nodes)
        except TypeError:
            raise ValueError(f'nodes: a list of "host:port" strings, not {nodes!r}') from None
    if not items:
        raise ValueError('nodes: give at least one node ("host:port")')
    return [parse_addr(s, port) for s in items]


def refreshes(v: Any) -> float:
    from ._core import seconds
    s = seconds(v, "refresh")
    if s <= 0:
        raise ValueError(f"refresh must be above 0 seconds, got {v!r}")
    return s
