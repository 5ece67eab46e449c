"""Shared fixtures: real services started per test session on free ports, in temp dirs.

Set ``INTERLINK_NATS_REQUIRE_SERVICES=1`` (``.ci/run`` and ``make test`` do) to turn a missing
service binary into a test error instead of a skip, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from interlink_nats.services.nats_server import NatsServerProcess, env_flag
from podman_host import BUSYBOX, PodmanHost

REQUIRE_ENV = "INTERLINK_NATS_REQUIRE_SERVICES"


def missing_service(what: str) -> None:
    """Skip locally, fail in CI (where ``INTERLINK_NATS_REQUIRE_SERVICES=1``)."""
    if env_flag(REQUIRE_ENV):
        pytest.fail(f"{what} is required ({REQUIRE_ENV}=1) but not available", pytrace=False)
    pytest.skip(f"{what} not available")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServerProcess]:
    """A real nats-server with JetStream for the whole session."""
    with NatsServerProcess() as server:
        yield server


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServerProcess) -> str:
    return nats_server.url


@pytest.fixture
def fresh_nats_server() -> Iterator[NatsServerProcess]:
    """A nats-server of the test's own, for tests that restart or kill it."""
    with NatsServerProcess() as server:
        yield server


@pytest.fixture
async def client_nc(nats_url: str) -> AsyncIterator[nats.aio.client.Client]:
    """A connection of the test's own, as the calling side."""
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


@pytest.fixture
async def server_nc(nats_url: str) -> AsyncIterator[nats.aio.client.Client]:
    """A second connection of the test's own, as the serving side."""
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


class RedisServer:
    """A real redis-server on a free port, in a temp dir, with no persistence."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._tmp.name,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    fallback = Path("/usr/bin/redis-server")
    binary = shutil.which("redis-server") or (str(fallback) if fallback.exists() else None)
    if binary is None:
        missing_service("redis-server (apt-get install -y redis-server)")
    server = RedisServer(binary)  # type: ignore[arg-type]
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


def pytest_report_header(config: pytest.Config) -> str:
    return f"{REQUIRE_ENV}={os.environ.get(REQUIRE_ENV, '')}"


@pytest.fixture(scope="session")
def podman_host() -> Iterator[PodmanHost]:
    """Rootful podman configured in a temp dir, with a busybox image; at the end nothing may be left behind."""
    podman = shutil.which("podman")
    if podman is None or shutil.which("runc") is None or not Path(BUSYBOX).exists():
        missing_service("podman, runc and busybox-static (apt-get install -y podman runc busybox-static)")
    host = PodmanHost(podman)  # type: ignore[arg-type]
    host.start()
    yield host
    left = host.stop()
    assert not left, f"the podman tests left these behind: {left}"
