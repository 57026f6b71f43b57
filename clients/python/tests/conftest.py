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


class Sluice:
    def __init__(self, binary: str, tmp: str):
        self.resp, self.http, raft = free_port(), free_port(), free_port()
        self.log = open(os.path.join(tmp, "sluice.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--resp-addr", f"127.0.0.1:{self.resp}", "--http-addr", f"127.0.0.1:{self.http}",
             "--raft-addr", f"127.0.0.1:{raft}", "--data-dir", os.path.join(tmp, "data")],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.redis = redis.Redis(port=self.resp, socket_timeout=5)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.redis.ping():
                    break
            except redis.exceptions.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("sluice did not start; see " + self.log.name)
                time.sleep(0.05)

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
