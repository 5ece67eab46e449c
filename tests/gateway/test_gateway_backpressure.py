"""/getLogs holds a few chunks per stream however slow the reader: the gateway's RSS, measured in its own process.

The submitter runs in a process of its own too, so only the gateway's memory is in the figure. A reader
that pauses must pause the submitter (the stream's credit follows what the HTTP client took), and a reader
that goes away must end the stream (the open-stream gauge returns to zero).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port
from processes import Proc, rss_bytes, wait_healthy
from stack import create_body, eventually, logs_body, new_pool, pod, terminated

LOG_BYTES = 100 * 1024 * 1024
MB = 1024 * 1024
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def big_log(nats_url: str, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """A gateway and a submitter as separate processes, and one finished pod with a 100 MiB log."""
    pool = new_pool()
    port = free_port()
    config = tmp_path / "submitter.yaml"
    config.write_text("build_config:\n  runtime: CONTAINER_RUNTIME_NONE\n")
    submitter = Proc(
        [
            *("submitter", "shell", "--config", str(config), "--pool", pool, "--nats-url", nats_url),
            *("--state-dir", str(tmp_path / "site"), "--poll-interval", "0.3"),
        ],
        {},
        tmp_path / "submitter.log",
    ).start()
    gateway = Proc(
        ["gateway", "--nats-url", nats_url, "--port", str(port), "--default-pool", pool],
        {"INTERLINK_GATEWAY_EVENTS_DURABLE": f"gw-{uuid.uuid4().hex[:8]}"},
        tmp_path / "gateway.log",
    ).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            await wait_healthy(client)
            line = "0123456789" * 7 + "\n"  # 71 bytes a line
            p = pod(containers={"main": ["sh", "-c", f"yes {line.strip()} | head -c {LOG_BYTES}"]})

            async def created() -> bool:
                return (await client.post("/create", json=create_body(p))).status_code == 200

            await eventually(created, within=60, what="the pool to take the pod")

            async def finished() -> bool:
                found = (await client.request("GET", "/status", json=[p])).json()
                return bool(found) and terminated(found[0])

            await eventually(finished, within=120, what="the 100 MiB log to be written")
            assert gateway.proc is not None
            yield {"client": client, "pod": p, "pid": gateway.proc.pid, "base": f"http://127.0.0.1:{port}"}
    finally:
        gateway.stop()
        submitter.stop()


async def open_streams(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    [value] = [ln.split()[-1] for ln in text.splitlines() if ln.startswith("interlink_gateway_log_streams ")]
    return float(value)


@contextlib.asynccontextmanager
async def slow_reader(base: str, p: dict[str, Any], take: int) -> AsyncIterator[int]:
    """A /getLogs reader that takes ``take`` bytes and then stops reading (the connection stays open)."""
    async with (
        httpx.AsyncClient(base_url=base, timeout=60) as own,
        own.stream("GET", "/getLogs", json=logs_body(p, "main")) as response,
    ):
        assert response.status_code == 200
        chunks = response.aiter_raw(16 * 1024)  # kept referenced: dropping it would close the response
        got = 0
        while got < take:
            got += len(await anext(chunks))
        yield got


async def peak_growth(pid: int, baseline: int, seconds: float) -> int:
    """Largest RSS growth over ``seconds`` (sampled: a slow reader's cost shows within a moment)."""
    peak = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        peak = max(peak, rss_bytes(pid) - baseline)
        await asyncio.sleep(0.05)
    return peak


async def test_a_slow_reader_of_a_100_mib_log_costs_the_gateway_a_few_chunks(big_log: dict[str, Any]) -> None:
    client, p, pid, base = big_log["client"], big_log["pod"], big_log["pid"], big_log["base"]
    warm = await client.request("GET", "/getLogs", json=logs_body(p, "main", Tail=10))  # loads every code path
    assert warm.status_code == 200
    baseline = rss_bytes(pid)
    async with slow_reader(base, p, 320 * 1024) as got:
        assert got >= 320 * 1024
        growth = await peak_growth(pid, baseline, 3.0)
        assert growth < 20 * MB, f"the gateway grew {growth / MB:.1f} MiB for one paused reader"
        assert await open_streams(client) == 1

    async def closed() -> bool:
        return await open_streams(client) == 0

    await eventually(closed, within=30, what="the disconnected reader's stream to be freed")
    whole = await client.request("GET", "/getLogs", json=logs_body(p, "main"))
    assert len(whole.content) == LOG_BYTES, "a reader that keeps up gets the whole log"


async def test_fifty_slow_readers_stay_bounded_and_disconnects_free_everything(big_log: dict[str, Any]) -> None:
    client, p, pid, base = big_log["client"], big_log["pod"], big_log["pid"], big_log["base"]
    warm = await client.request("GET", "/getLogs", json=logs_body(p, "main", Tail=10))
    assert warm.status_code == 200
    baseline = rss_bytes(pid)
    async with contextlib.AsyncExitStack() as readers:
        for _ in range(50):
            await readers.enter_async_context(slow_reader(base, p, 64 * 1024))
        growth = await peak_growth(pid, baseline, 3.0)
        # Each paused stream: at most the window (4 x 64 KiB) queued plus what the socket layer holds.
        assert growth < 50 * MB, f"the gateway grew {growth / MB:.1f} MiB for 50 paused readers"
        assert await open_streams(client) == 50

    async def all_closed() -> bool:
        return await open_streams(client) == 0

    await eventually(all_closed, within=60, what="every disconnected reader's stream to be freed")
