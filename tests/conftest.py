"""Shared fixtures: real services started per test session on free ports, in temp dirs.

Set ``INTERLINK_NATS_REQUIRE_SERVICES=1`` (``.ci/run`` and ``make test`` do) to turn a missing
service binary into a test error instead of a skip, so CI can never pass by skipping.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio
from interlink_nats.services.ops.nats_server import NatsServerProcess, env_flag
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


LEFTOVER_TASKS_FIXTURE = "_no_asyncio_task_left_behind"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every async test checks, after all its fixtures are torn down, that it left no task running."""
    for item in items:
        if pytest_asyncio.is_async_test(item):
            item.fixturenames.insert(0, LEFTOVER_TASKS_FIXTURE)  # type: ignore[attr-defined]  # pytest.Item has no fixturenames; async test items are Functions


@pytest.fixture(name=LEFTOVER_TASKS_FIXTURE)
async def no_asyncio_task_left_behind() -> AsyncIterator[None]:
    """Fails a test whose event loop still has tasks once the test and its other fixtures are done.

    The loop would cancel them silently when it closes: a background task someone forgot to stop,
    which in production runs on after the component that started it is gone.
    """
    yield
    me = asyncio.current_task()
    for _ in range(20):  # tasks cancelled during teardown need a few loop turns to finish
        left = [t for t in asyncio.all_tasks() if t is not me and not t.done() and not _closed_nats_leftover(t)]
        if not left:
            return
        await asyncio.sleep(0.01)
    pytest.fail(
        f"the test left {len(left)} asyncio task(s) running: " + "; ".join(sorted(_describe(t) for t in left)),
        pytrace=False,
    )


def _closed_nats_leftover(task: asyncio.Task[Any]) -> bool:
    """nats-py's message loop of a subscription whose connection is already closed.

    nats-py does not stop its reply-inbox subscription when a connection is closed while reconnecting
    (nats-server gone); the task waits on a queue nobody fills and is collected with the loop. Anything
    else, including a subscription of a connection someone forgot to close, still fails the test.
    """
    coro: Any = task.get_coro()
    if getattr(coro, "__qualname__", "") != "Subscription._wait_for_msgs" or coro.cr_frame is None:
        return False
    conn = getattr(coro.cr_frame.f_locals.get("self"), "_conn", None)
    return bool(getattr(conn, "is_closed", False))


def _describe(task: asyncio.Task[Any]) -> str:
    """The task's name, coroutine and where it waits (innermost awaiting frame), to find who started it."""
    coro: Any = task.get_coro()
    name = getattr(coro, "__qualname__", None) or repr(coro)
    frame = None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    where = f" at {Path(frame.f_code.co_filename).name}:{frame.f_lineno}" if frame is not None else ""
    return f"{task.get_name()} ({name}{where})"
