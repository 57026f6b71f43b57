"""Starts the real sluice binary (SLUICE_BINARY) for the tests that need
one; without it they skip, unless SLUICE_REQUIRE_TOOLS is set (CI), when
they fail."""

import os
import socket
import subprocess
import threading
import time

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The binary could not bind a port picked for it."""


class Sluice:
    def __init__(self, binary: str, tmp: str, *extra: str, name: str = "sluice", host: str = "127.0.0.1",
                 resp: int = 0):
        # A port free_port() saw free may be taken before the binary binds
        # it (other tests run beside these): then start again on others.
        for attempt in range(3):
            try:
                self._start(binary, tmp, extra, name, host, resp, attempt)
                return
            except PortTaken:
                if attempt == 2 or resp:
                    raise

    def _start(self, binary, tmp, extra, name, host, resp, attempt) -> None:
        self.resp, self.http, self.raft = resp or free_port(), free_port(), free_port()
        self.host, self.addr = host, f"{host}:{self.resp}"
        self.log = open(os.path.join(tmp, f"{name}.log" if not attempt else f"{name}.{attempt}.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--resp-addr", self.addr, "--http-addr", f"127.0.0.1:{self.http}",
             "--raft-addr", f"{host}:{self.raft}", "--data-dir", os.path.join(tmp, f"{name}-data{attempt or ''}"),
             *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.redis = redis.Redis(host=host, port=self.resp, socket_timeout=5)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.redis.ping():
                    break
            # Refused before it listens; LOADING, or no answer yet, while a
            # joining node waits for the cluster (a loaded machine has
            # held a PING past 5 s).
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self._failed()
                time.sleep(0.05)
        if int(self.redis.info("server").get("process_id", -1)) != self.proc.pid:
            self._failed()  # another server answered on the port ours could not bind

    def _failed(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()
        with open(self.log.name, "rb") as f:
            if b"address already in use" in f.read():
                raise PortTaken(self.log.name)
        raise RuntimeError("sluice did not start; see " + self.log.name)

    def kill(self) -> None:
        """SIGKILL: the node is gone at once, its port refuses."""
        self.proc.kill()
        self.proc.wait()

    def commands(self) -> int:
        """Commands the server has processed, less the INFO that asks."""
        return int(self.redis.info("stats")["total_commands_processed"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Cluster:
    """Three nodes on one machine, grown from n1 with --join
    (docs/cluster.md), once each lists all three as members. hosts: one
    loopback address per node, all on one RESP port (as the addresses of
    one DNS name); by default all on 127.0.0.1, each on its own port."""

    def __init__(self, binary: str, tmp: str, hosts=None):
        hosts = hosts or ["127.0.0.1"] * 3
        for attempt in range(3):
            # One RESP port for all (the DNS case) is picked again, with
            # fresh data directories, when a node finds it taken.
            port = free_port() if len(set(hosts)) == 3 else 0
            self.nodes = []
            try:
                for i, h in enumerate(hosts):
                    join = ["--join", self.nodes[0].addr] if i else []
                    self.nodes.append(Sluice(binary, tmp, "--node-id", f"n{i + 1}", *join,
                                             name=f"n{i + 1}" + (f".{attempt}" if attempt else ""), host=h, resp=port))
                break
            except PortTaken:
                self.stop()
                if attempt == 2:
                    raise
        deadline = time.monotonic() + 60
        while not all(self.members(s) == 3 for s in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not form; see " + tmp)
            time.sleep(0.05)

    @staticmethod
    def members(s: Sluice) -> int:
        try:
            return sum(1 for m in s.redis.execute_command("RL.CLUSTER", "NODES") if m[4] != b"unreachable")
        except redis.exceptions.RedisError:
            return 0

    def stop(self) -> None:
        for s in self.nodes:
            if s.proc.poll() is None:
                s.stop()
            else:
                s.log.close()


def _binary() -> str:
    b = os.environ.get("SLUICE_BINARY", "")
    if b and os.access(b, os.X_OK):
        return b
    why = ("SLUICE_BINARY is not set to the sluice executable "
           "(go build -o /tmp/sluice ./cmd/sluice; SLUICE_BINARY=/tmp/sluice)")
    if os.environ.get("SLUICE_REQUIRE_TOOLS"):
        pytest.fail(why + "; SLUICE_REQUIRE_TOOLS is set")
    pytest.skip(why)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = Sluice(_binary(), str(tmp_path_factory.mktemp("sluice")))
    yield s
    s.stop()


@pytest.fixture
def cluster(tmp_path):
    """A fresh three-node cluster for a test that kills a node."""
    c = Cluster(_binary(), str(tmp_path))
    yield c
    c.stop()


@pytest.fixture
def dns_cluster(tmp_path):
    """Three nodes on 127.0.0.1, .2 and .3, one RESP port: what a DNS name
    with three addresses points at."""
    c = Cluster(_binary(), str(tmp_path), hosts=["127.0.0.1", "127.0.0.2", "127.0.0.3"])
    yield c
    c.stop()


@pytest.fixture
def dead_port() -> int:
    """A port nothing listens on: a stopped sluice."""
    return free_port()


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()
