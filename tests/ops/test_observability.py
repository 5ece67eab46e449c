"""Health and metrics of the processes without a web stack, and structured log fields.

Before: the submitter and the controller served neither /metrics nor /healthz, and JSON logs kept pod
UID, pool and job id inside the message text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from controller_stack import masterqueue, running_controller
from interlink_nats.controller.observability import controller_probes
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.log_context import bind, log_fields
from interlink_nats.kernel.logging_setup import JsonFormatter
from interlink_nats.services.ops.probes import Probes, serve_probes
from kube_emulator import KubeEmulator
from prometheus_client import CollectorRegistry, Counter


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


async def get(server: asyncio.Server, path: str) -> httpx.Response:
    host, port = server.sockets[0].getsockname()[:2]
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30.0) as http:
        return await http.get(path)


async def test_probes_report_every_check_and_serve_metrics() -> None:
    registry = CollectorRegistry()
    Counter("demo_things", "things", registry=registry).inc(3)
    state = {"nats": False}
    probes = Probes(
        registry=registry,
        checks={"nats": lambda: (state["nats"], "connected" if state["nats"] else "disconnected")},
        info=lambda: {"nats_server": "127.0.0.1:4222"},
    )
    server = await serve_probes(probes, "127.0.0.1", 0)
    try:
        down = await get(server, "/healthz")
        assert down.status_code == 503
        assert down.json() == {
            "status": "unhealthy",
            "checks": {"nats": {"ok": False, "detail": "disconnected"}},
            "nats_server": "127.0.0.1:4222",
        }
        state["nats"] = True
        up = await get(server, "/healthz")
        assert (up.status_code, up.json()["status"]) == (200, "ok")
        metrics = await get(server, "/metrics")
        assert metrics.status_code == 200
        assert "demo_things_total 3.0" in metrics.text
        assert (await get(server, "/nope")).status_code == 404
    finally:
        server.close()
        await server.wait_closed()


async def test_a_raising_check_fails_health_instead_of_the_server() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    healthy, report = Probes(registry=CollectorRegistry(), checks={"x": broken}).health()
    assert not healthy
    assert report["checks"] == {"x": {"ok": False, "detail": "check failed: RuntimeError: boom"}}


async def test_controller_health_and_metrics(emu: KubeEmulator, nats_url: str) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, poolTimeout=30))
    async with running_controller(emu) as controller:
        server = await serve_probes(controller_probes(controller), "127.0.0.1", 0)
        try:
            await asyncio.wait_for(controller.synced.wait(), 60)
            deadline = asyncio.get_running_loop().time() + 60
            while (health := await get(server, "/healthz")).status_code != 200:
                assert asyncio.get_running_loop().time() < deadline, health.text
                await asyncio.sleep(0.1)
            body = health.json()
            assert body["checks"]["kubernetes"]["ok"] and body["checks"]["nats"]["ok"]
            assert list(body["nats_servers"]) == [nats_url]
            assert body["nats_servers"][nats_url] == nats_url.split("://", 1)[1]
            metrics = (await get(server, "/metrics")).text
            assert "kueue_nats_reconcile_passes_total" in metrics
            assert "kueue_nats_masterqueues 1.0" in metrics
        finally:
            server.close()
            await server.wait_closed()
    # The loop is stopped now, so the next failure stays: a pass that hit a Kubernetes error fails health.
    controller.last_error = "MasterQueue mq: 403 forbidden"
    healthy, report = controller_probes(controller).health()
    assert not healthy
    assert report["checks"]["kubernetes"] == {"ok": False, "detail": "MasterQueue mq: 403 forbidden"}


def formatted(record_logger: logging.Logger, message: str, **extra: str) -> dict[str, object]:
    record = record_logger.makeRecord(record_logger.name, logging.INFO, __file__, 1, message, (), None, extra=extra)
    return json.loads(JsonFormatter().format(record))


def test_json_logs_carry_pod_pool_and_job_as_fields() -> None:
    logger = logging.getLogger("interlink_nats.test")
    with log_fields(pod_uid="u-1", namespace="ns", pool="site-a"):
        bind(job_id="42")
        entry = formatted(logger, "submitted")
    assert entry["message"] == "submitted"
    assert {k: entry[k] for k in ("pod_uid", "namespace", "pool", "job_id")} == {
        "pod_uid": "u-1",
        "namespace": "ns",
        "pool": "site-a",
        "job_id": "42",
    }
    outside = formatted(logger, "idle", pool="site-b")
    assert outside["pool"] == "site-b" and "pod_uid" not in outside
    with pytest.raises(ValueError, match="unknown log fields"), log_fields(pod_id="typo"):
        pass


async def test_submitter_health_follows_nats_and_the_backend(nats_url: str, tmp_path: Path) -> None:
    import nats as nats_client
    from interlink_nats.services.bus.events_stream import ensure_events_stream
    from interlink_nats.services.bus.rpc import submitter_client
    from interlink_nats.submitters.core.backend import BackendUnavailable
    from interlink_nats.submitters.edge.observability import submitter_probes
    from interlink_nats.submitters.runtime import Submitter
    from interlink_nats.submitters.testing import FakeBackend, settings_for
    from jobs import pod_job

    nc = await nats_client.connect(nats_url)
    await ensure_events_stream(nc.jetstream())
    pool = f"probe-{uuid.uuid4().hex[:8]}"
    fake = FakeBackend()
    submitter = Submitter(settings_for(tmp_path, nats_url, pool=pool, poll_interval=0.1), backend=fake)
    server = await serve_probes(submitter_probes(submitter), "127.0.0.1", 0)
    try:
        before = await get(server, "/healthz")
        assert before.status_code == 503 and not before.json()["checks"]["nats"]["ok"]
        await submitter.start()
        health = await wait_for_health(server, 200)
        assert health["nats_server"] == nats_url and health["pool"] == pool
        uid = str(uuid.uuid4())
        await submitter_client(nc, pool).submit(pb.SubmitRequest(job=pod_job(uid, {"main": "true"})))
        metrics = (await get(server, "/metrics")).text
        assert f'interlink_submitter_jobs_tracked{{backend="{fake.name}",pool="{pool}"}} 1.0' in metrics
        fake.fail("poll", BackendUnavailable("squeue: connection refused"), times=10_000)
        failing = await wait_for_health(server, 503)
        assert failing["checks"]["backend"]["detail"].endswith("squeue: connection refused")
        fake._scripts["poll"].failures.clear()  # the batch system is back
        await wait_for_health(server, 200)
        await submitter.nc.close()  # type: ignore[union-attr]
        assert (await wait_for_health(server, 503))["checks"]["nats"]["detail"] == "not connected to NATS"
    finally:
        server.close()
        await server.wait_closed()
        await submitter.stop()
        await nc.close()


async def wait_for_health(server: asyncio.Server, status: int) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 60
    while (response := await get(server, "/healthz")).status_code != status:
        assert asyncio.get_running_loop().time() < deadline, response.text
        await asyncio.sleep(0.05)
    body: dict[str, Any] = response.json()
    return body
