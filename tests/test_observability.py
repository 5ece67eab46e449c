"""Health and metrics of the processes without a web stack, and structured log fields.

Before: the submitter and the controller served neither /metrics nor /healthz, and JSON logs kept pod
UID, pool and job id inside the message text.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from interlink_nats.controller.observability import controller_probes
from interlink_nats.kernel.log_context import bind, log_fields
from interlink_nats.services.probes import Probes, serve_probes
from kube_emulator import KubeEmulator
from prometheus_client import CollectorRegistry, Counter
from test_controller_integration import masterqueue, running_controller

from interlink_nats.logs import JsonFormatter


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
            controller.last_error = "MasterQueue mq: 403 forbidden"
            failing = await get(server, "/healthz")
            assert failing.status_code == 503
            assert failing.json()["checks"]["kubernetes"]["detail"] == "MasterQueue mq: 403 forbidden"
        finally:
            server.close()
            await server.wait_closed()


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
