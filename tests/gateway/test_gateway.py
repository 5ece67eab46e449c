"""Gateway behaviour beyond the happy path: follow logs, pool problems, auth, sockets, health, metrics."""

from __future__ import annotations

import asyncio
import time
import uuid
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import nats
import pytest
from conftest import RedisServer
from interlink_nats.kernel.subjects import SUBMITTER_SERVICE
from interlink_nats.services.gateway.server import running_gateway
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.submitters.runtime import Submitter
from nats.aio.msg import Msg
from stack import (
    create_body,
    eventually,
    full_stack,
    gateway_only,
    logs_body,
    new_pool,
    pod,
    submitter_settings,
    terminated,
)


async def test_follow_streams_lines_as_they_are_written_until_the_container_ends(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"ticker": ["sh", "-c", "for i in 1 2 3 4 5; do echo tick-$i; sleep 0.4; done"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def running() -> bool:
            status = await stack.status_of(p)
            return any("running" in c["state"] or "terminated" in c["state"] for c in status["containers"])

        await eventually(running, what="the container to start")
        arrivals: list[tuple[float, str]] = []
        started = time.monotonic()
        async with stack.http.stream("GET", "/getLogs", json=logs_body(p, "ticker", Follow=True)) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain")
            async for line in response.aiter_lines():
                if line:
                    arrivals.append((time.monotonic() - started, line))
        assert [line for _, line in arrivals] == [f"tick-{i}" for i in range(1, 6)]
        # Streamed, not buffered: the lines arrived over time, not all at the end.
        assert arrivals[-1][0] - arrivals[0][0] > 0.5


async def test_tail_and_bytes_limit_the_log(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["sh", "-c", "for i in 1 2 3 4 5; do echo line-$i; done"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="the container to finish")
        tail = await stack.get("/getLogs", logs_body(p, "main", Tail=2))
        assert tail.text == "line-4\nline-5\n"
        # kubectl logs --limit-bytes=N: the first N bytes from where output starts (log start, or first Tail line).
        limited = await stack.get("/getLogs", logs_body(p, "main", Bytes=4))
        assert limited.text == "line"
        both = await stack.get("/getLogs", logs_body(p, "main", Tail=2, Bytes=9))
        assert both.text == "line-4\nli"
        followed = await stack.get("/getLogs", logs_body(p, "main", Bytes=8, Follow=True))
        assert followed.text == "line-1\nl"
        unknown = await stack.get("/getLogs", logs_body(p, "nope"))
        assert unknown.status_code == 404 and "nope" in unknown.text


async def test_a_pool_without_submitters_is_a_503_after_a_bounded_wait(nats_url: str) -> None:
    async with gateway_only(nats_url, default_pool=new_pool(), pool_wait_s=0.5) as stack:
        started = time.monotonic()
        response = await stack.post("/create", create_body(pod(containers={"main": ["true"]})))
        elapsed = time.monotonic() - started
        assert response.status_code == 503
        assert "unavailable" in response.text and stack.pool in response.text
        assert elapsed < 5


async def test_a_pod_naming_no_pool_without_a_default_is_a_4xx(nats_url: str) -> None:
    async with gateway_only(nats_url, default_pool=None) as stack:
        response = await stack.post("/create", create_body(pod(containers={"main": ["true"]})))
        assert response.status_code == 422
        assert "pool.vk.io" in response.text


async def test_the_toleration_routes_the_pod_to_its_pool(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        stack.gateway.settings.default_pool = None
        p = pod(containers={"main": ["true"]}, pool=stack.pool)
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 200, response.text
        assert stack.gateway.store.get(p["metadata"]["uid"]).pool == stack.pool  # type: ignore[union-attr]


async def test_a_pod_the_renderer_rejects_is_a_422_naming_the_field(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["true"]})
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}]
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 422
        assert "persistentVolumeClaim" in response.text


async def test_the_pools_flavor_table_reaches_the_gateway_and_an_unknown_flavor_is_a_422(
    nats_url: str, tmp_path: Path
) -> None:
    """The site file's flavors travel in the pool's announced BuildConfig; the gateway renders with them."""
    pool = new_pool()
    flavors = {"small": {"cpu_default": "1"}, "gpu": {"cpu_default": "8", "gpu": True}}
    site = submitter_settings(nats_url, pool, tmp_path, build_config={"runtime": "none", "flavors": flavors})
    async with Submitter(site), gateway_only(nats_url, default_pool=pool) as stack:
        p = pod(containers={"main": ["true"]})
        p["metadata"]["annotations"] = {"slurm-job.vk.io/flavor": "huge"}
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 422, response.text
        assert "slurm-job.vk.io/flavor" in response.text and "its flavors: gpu, small" in response.text
        p = pod(containers={"main": ["true"]})
        p["metadata"]["annotations"] = {"slurm-job.vk.io/flavor": "small"}
        assert (await stack.post("/create", create_body(p))).status_code == 200


async def test_a_pod_too_large_for_nats_is_a_413_naming_its_size_and_the_limit(nats_url: str, tmp_path: Path) -> None:
    """429 would tell interLink to retry, which can never help: the pod stays too large."""
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["true"]})
        p["spec"]["volumes"] = [{"name": "data", "configMap": {"name": "big"}}]
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        body = create_body(p)
        body["container"][0]["configMaps"] = [{"metadata": {"name": "big"}, "data": {"blob": "x" * 2_000_000}}]
        response = await stack.post("/create", body)
        assert response.status_code == 413, response.text
        limit = stack.gateway.nc.max_payload
        assert "max_payload" in response.text and str(limit) in response.text
        size = int(response.text.split(" bytes")[0].rsplit(" ", 1)[-1])
        assert size > 2_000_000 > limit
        assert stack.gateway.store.get(p["metadata"]["uid"]) is None, "nothing is left behind"


async def test_bearer_token_is_required_when_configured(nats_url: str) -> None:
    async with gateway_only(nats_url, default_pool="x", bearer_token="s3cret") as stack:
        assert (await stack.get("/status", [])).status_code == 401
        ok = await stack.http.request("GET", "/status", json=[], headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        wrong = await stack.http.request("GET", "/status", json=[], headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert (await stack.http.get("/healthz")).status_code == 200, "health stays open for probes"


async def test_the_gateway_listens_on_a_unix_socket(nats_url: str, tmp_path: Path) -> None:
    from interlink_nats.services.gateway.server import serving

    sock = tmp_path / "gw.sock"
    settings = GatewaySettings(
        nats=GatewayNatsSettings(url=nats_url), unix_socket=sock, events_durable=f"gw-{uuid.uuid4().hex[:8]}"
    )
    async with running_gateway(settings) as gateway, serving(gateway, settings):
        assert sock.exists()
        transport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            response = await client.request("GET", "/status", json=[])
        assert response.status_code == 200
        assert response.json()["status"] == "ok"


async def test_the_date_header_moves_on_though_the_servers_loop_wakes_once_a_second(
    nats_url: str, tmp_path: Path
) -> None:
    """``GatewayServer.main_loop`` replaces uvicorn's ten ticks a second by one (``DATE_TICK_S``): the Date header,
    which uvicorn refreshes on its ticks, still follows the clock."""
    from interlink_nats.services.gateway.server import serving

    sock = tmp_path / "gw.sock"
    settings = GatewaySettings(
        nats=GatewayNatsSettings(url=nats_url), unix_socket=sock, events_durable=f"gw-{uuid.uuid4().hex[:8]}"
    )
    async with running_gateway(settings) as gateway, serving(gateway, settings):
        transport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            first = parsedate_to_datetime((await client.get("/healthz")).headers["date"])
            deadline = time.monotonic() + 60
            while parsedate_to_datetime((await client.get("/healthz")).headers["date"]) <= first:
                assert time.monotonic() < deadline, "the Date header never moved on"
                await asyncio.sleep(0.1)


async def test_healthz_and_metrics_reflect_the_gateway(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        health = await stack.http.get("/healthz")
        assert health.status_code == 200 and health.json()["nats"] is True
        p = pod(containers={"main": ["true"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200
        assert (await stack.post("/create", {"pod": {}})).status_code == 400
        text = (await stack.http.get("/metrics")).text
        assert 'interlink_gateway_requests_total{code="200",endpoint="create"} 1.0' in text
        assert 'interlink_gateway_requests_total{code="400",endpoint="create"} 1.0' in text
        assert "interlink_gateway_pods{" in text
        # The create's one Submit, timed from the gateway's side (the pool is known: it rendered with its BuildConfig).
        submitted = f'interlink_gateway_rpc_seconds_count{{method="Submit",outcome="ok",pool="{stack.pool}"}} 1.0'
        assert submitted in text, text
        assert p["metadata"]["uid"] not in text, "no pod data in metric labels"


async def test_healthz_reports_a_redis_outage_and_recovery(nats_url: str, redis_server: RedisServer) -> None:
    own = RedisServer(redis_server.binary)
    own.start()
    try:
        async with gateway_only(nats_url, default_pool="x", redis_url=own.url) as stack:
            assert (await stack.http.get("/healthz")).json()["redis"] is True
            own.stop()
            health = await stack.http.get("/healthz")
            assert health.status_code == 503
            assert health.json()["redis"] is False
            own.start()
            assert (await stack.http.get("/healthz")).status_code == 200
    finally:
        own.cleanup()


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_wrong_methods_are_405(nats_url: str, method: str) -> None:
    async with gateway_only(nats_url, default_pool="x") as stack:
        assert (await stack.http.request(method, "/create")).status_code == 405


async def test_a_lost_event_is_made_up_for_by_pulling_stale_statuses(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path, stale_after_s=0.5) as stack:
        await stack.gateway.events.stop()  # from now on no event reaches this gateway
        p = pod(containers={"main": ["sh", "-c", "exit 4"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="the status pulled by the safety net")
        [main] = (await stack.status_of(p))["containers"]
        assert main["state"]["terminated"]["exitCode"] == 4
        assert stack.gateway.events.applied == 0


async def test_secret_values_never_reach_the_logs(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import base64
    import logging

    marker = "s3cr3t-" + uuid.uuid4().hex
    caplog.set_level(logging.DEBUG)
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["sh", "-c", "test -s token"]})
        p["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": "creds"}}]
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "creds", "mountPath": "/creds"}]
        p["spec"]["containers"][0]["workingDir"] = "/creds"
        body = create_body(p)
        body["container"][0]["secrets"] = [
            {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(marker.encode()).decode()}}
        ]
        assert (await stack.post("/create", body)).status_code == 200

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="the pod with a secret to finish")
        [main] = (await stack.status_of(p))["containers"]
        assert main["state"]["terminated"]["exitCode"] == 0, "the secret file was there for the container"
        rejected = create_body(pod(containers={"main": ["true"]}))
        rejected["pod"]["spec"]["containers"][0]["env"] = [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": marker}}}
        ]
        assert (await stack.post("/create", rejected)).status_code == 422
        text = (await stack.http.get("/metrics")).text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert marker not in logged and base64.b64encode(marker.encode()).decode() not in logged
    assert marker not in text


async def test_status_is_answered_from_memory_with_no_nats_traffic(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["sleep", "2"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200
        # Count what the gateway asks of pools (RPC requests), not the JetStream acks of the events that the
        # running job keeps sending meanwhile: those would make a plain message count flaky on a busy machine.
        asked: list[str] = []
        spy = await nats.connect(nats_url)

        async def seen(msg: Msg) -> None:
            asked.append(msg.subject)

        sub = await spy.subscribe(f"{SUBMITTER_SERVICE}.>", cb=seen)
        await spy.flush()
        try:
            for _ in range(5):
                status = await stack.status_of(p)
                assert [c["name"] for c in status["containers"]] == ["main"], "every container, even before any event"
            await stack.gateway.nc.flush()
            await spy.flush()
        finally:
            await sub.unsubscribe()
            await spy.close()
        assert asked == []


async def test_a_followed_log_with_a_byte_limit_ends_after_the_first_bytes(nats_url: str, tmp_path: Path) -> None:
    """Follow + Bytes: the stream ends once N bytes went out, although the container keeps running."""
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["sh", "-c", "echo 0123456789; sleep 120"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def has_output() -> bool:
            return (await stack.get("/getLogs", logs_body(p, "main"))).text != ""

        await eventually(has_output, what="the first log line")
        followed = await stack.get("/getLogs", logs_body(p, "main", Bytes=4, Follow=True))
        assert followed.status_code == 200 and followed.text == "0123"
        assert (await stack.post("/delete", p)).status_code == 200


async def test_a_gateway_cut_off_from_nats_answers_503_at_once_naming_nats(
    tmp_path: Path, fresh_nats_server: NatsServerProcess
) -> None:
    """While its own connection is down, the gateway says NATS is unavailable rather than blame the pool."""
    async with full_stack(fresh_nats_server.url, tmp_path) as stack:
        ok = pod(containers={"main": ["sleep", "60"]})
        assert (await stack.post("/create", create_body(ok))).status_code == 200
        await asyncio.to_thread(fresh_nats_server.stop_blocking)

        async def disconnected() -> bool:
            return not stack.gateway.nc.is_connected

        await eventually(disconnected, what="the gateway to notice NATS is gone")
        for path, body in (
            ("/create", create_body(pod(containers={"main": ["true"]}))),
            ("/delete", ok),
            ("/getLogs", logs_body(ok, "main")),
        ):
            started = time.monotonic()
            response = await stack.post(path, body)
            elapsed = time.monotonic() - started
            assert response.status_code == 503, (path, response.text)
            assert "NATS is unavailable" in response.text and stack.pool not in response.text
            assert elapsed < 4, f"{path} answered after {elapsed:.1f}s (pool_wait_s is 5)"
        status = await stack.get("/status", [ok])
        assert status.status_code == 200, "status is served from memory"
        await asyncio.to_thread(fresh_nats_server.start_blocking)
