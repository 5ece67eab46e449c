"""SIGTERM/SIGINT stop a gateway process gracefully: in-flight requests get ``shutdown_grace_s`` (a log
follow is then cut), NATS is drained, and the process exits 0. The caller, not uvicorn, owns the signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from interlink_nats.submitters.runtime import Submitter
from stack import create_body, eventually, gateway_only, logs_body, new_pool, pod, submitter_settings

BIN = Path(sys.executable).parent


async def test_serving_leaves_sigint_and_sigterm_to_the_caller(nats_url: str) -> None:
    """uvicorn would install its own handlers while serving, so ``stop`` would be set only after it finished."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        async with gateway_only(nats_url, default_pool=None) as stack:
            assert (await stack.http.get("/healthz")).status_code == 200
            assert {sig: signal.getsignal(sig) for sig in before} == before
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), 10)
            assert (await stack.http.get("/healthz")).status_code == 200, "the caller decides when to stop"
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_drains_the_gateway_process_within_the_grace(
    nats_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    pool = new_pool()
    port = free_port()
    log = tmp_path / "gateway.log"
    env = {
        **os.environ,
        "INTERLINK_GATEWAY_EVENTS_DURABLE": f"gw-{uuid.uuid4().hex[:8]}",
        "INTERLINK_GATEWAY_SHUTDOWN_GRACE_S": "1",
        "INTERLINK_GATEWAY_SUBMIT_TIMEOUT_S": "300",  # so no call deadline ends the follow for us
    }
    args = ["gateway", "--nats-url", nats_url, "--port", str(port), "--default-pool", pool, "--log-level", "info"]
    async with Submitter(submitter_settings(nats_url, pool, tmp_path / "site")):
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                str(BIN / "interlink-nats"), *args, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:

                async def healthy() -> bool:
                    try:
                        return (await http.get("/healthz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await eventually(healthy, within=60, what="the gateway to serve")
                p = pod(containers={"main": ["sh", "-c", "echo started; sleep 300"]})
                assert (await http.post("/create", json=create_body(p))).status_code == 200
                follow = logs_body(p, "main", Follow=True)
                async with http.stream("GET", "/getLogs", json=follow, timeout=60) as response:
                    assert response.status_code == 200
                    chunks = response.aiter_bytes()
                    received = b""
                    while b"started" not in received:
                        received += await anext(chunks)
                    proc.send_signal(sig)  # a follow is in flight: it may hold the gateway only for the grace
                    with contextlib.suppress(httpx.RemoteProtocolError):  # cut after the grace
                        async for chunk in chunks:
                            received += chunk
                returncode = await asyncio.wait_for(proc.wait(), 60)  # grace 1 s; the pod sleeps 300 s
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    text = log.read_text()
    assert returncode == 0, text
    assert "gateway stopping" in text, text
    assert b"started" in received


async def test_a_signal_while_waiting_for_redis_stops_the_gateway(nats_url: str, tmp_path: Path) -> None:
    """Start-up waits for redis as long as it takes; a stop must not wait with it."""
    log = tmp_path / "gateway.log"
    env = {**os.environ, "INTERLINK_GATEWAY_EVENTS_DURABLE": f"gw-{uuid.uuid4().hex[:8]}"}
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    args = ["gateway", "--nats-url", nats_url, "--port", str(free_port()), "--redis-url", nobody]
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "interlink-nats"), *args, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:

        async def waiting() -> bool:
            return "waiting for redis" in log.read_text()

        await eventually(waiting, within=60, what="the gateway to wait for redis")
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = log.read_text()
    assert returncode == 0, text
    assert "gateway stopping before it served" in text, text
