"""A gateway that is killed, restarted, or loses redis loses no pod (real processes, kill -9)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from conftest import RedisServer, free_port
from processes import Proc, wait_healthy
from stack import create_body, eventually, logs_body, new_pool, pod, terminated


@pytest.fixture
def world(nats_url: str, redis_server: RedisServer, tmp_path: Path) -> Iterator[dict[str, object]]:
    pool = new_pool()
    port = free_port()
    config = tmp_path / "submitter.yaml"
    config.write_text("build_config:\n  runtime: CONTAINER_RUNTIME_NONE\n")
    submitter = Proc(
        [
            "submitter",
            "shell",
            "--config",
            str(config),
            "--pool",
            pool,
            "--nats-url",
            nats_url,
            "--state-dir",
            str(tmp_path / "site"),
            "--poll-interval",
            "0.3",
        ],
        {},
        tmp_path / "submitter.log",
    ).start()
    gateway_env = {"INTERLINK_GATEWAY_EVENTS_DURABLE": f"gw-{uuid.uuid4().hex[:8]}"}
    gateway_args = [
        "gateway",
        "--nats-url",
        nats_url,
        "--port",
        str(port),
        "--redis-url",
        redis_server.url,
        "--default-pool",
        pool,
    ]
    gateway = Proc(gateway_args, gateway_env, tmp_path / "gateway.log")
    try:
        yield {"gateway": gateway, "base": f"http://127.0.0.1:{port}", "redis": redis_server, "log": tmp_path}
    finally:
        gateway.stop()
        submitter.stop()


async def statuses(client: httpx.AsyncClient, pods: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    response = await client.request("GET", "/status", json=pods)
    assert response.status_code == 200, response.text
    return {s["UID"]: s for s in response.json()}


async def check_all_pods_finish_with_right_logs(client: httpx.AsyncClient, pods: list[dict]) -> None:
    async def all_done() -> bool:
        found = await statuses(client, pods)
        return len(found) == len(pods) and all(terminated(s) for s in found.values())

    await eventually(all_done, within=60, what="every pod known and terminated")
    found = await statuses(client, pods)
    for p in pods:
        uid = p["metadata"]["uid"]  # type: ignore[index]
        assert [c["state"]["terminated"]["exitCode"] for c in found[uid]["containers"]] == [0]
        log = await client.request("GET", "/getLogs", json=logs_body(p, "main"))
        assert log.status_code == 200 and log.text == f"pod {p['metadata']['name']}\n"  # type: ignore[index]
    for p in pods:
        assert (await client.post("/delete", json=p)).status_code == 200
    assert await statuses(client, pods) == {}


def make_pods(count: int) -> list[dict]:
    return [
        pod(name=f"p{i}", containers={"main": ["sh", "-c", f"sleep {0.2 * (i % 5)}; echo pod p{i}"]})
        for i in range(count)
    ]


async def test_kill_9_of_the_gateway_mid_run_loses_no_pod(world: dict) -> None:
    gateway: Proc = world["gateway"].start()
    pods = make_pods(20)
    async with httpx.AsyncClient(base_url=world["base"], timeout=30) as client:
        await wait_healthy(client)
        for p in pods[:10]:
            assert (await client.post("/create", json=create_body(p))).status_code == 200
        gateway.kill()
        gateway.start()
        await wait_healthy(client)
        for p in pods[10:]:
            assert (await client.post("/create", json=create_body(p))).status_code == 200
        gateway.kill()  # again, while the second half runs
        gateway.start()
        await wait_healthy(client)
        await check_all_pods_finish_with_right_logs(client, pods)


async def test_a_flushed_redis_is_rebuilt_from_the_pools(world: dict) -> None:
    gateway: Proc = world["gateway"].start()
    pods = make_pods(12)
    async with httpx.AsyncClient(base_url=world["base"], timeout=30) as client:
        await wait_healthy(client)
        for p in pods:
            assert (await client.post("/create", json=create_body(p))).status_code == 200
        gateway.kill()
        redis.Redis.from_url(world["redis"].url).flushall()
        gateway.start()
        await wait_healthy(client)
        await check_all_pods_finish_with_right_logs(client, pods)


async def test_a_flush_while_running_is_rewritten_from_memory(world: dict) -> None:
    gateway: Proc = world["gateway"].start()
    pods = make_pods(5)
    async with httpx.AsyncClient(base_url=world["base"], timeout=30) as client:
        await wait_healthy(client)
        for p in pods:
            assert (await client.post("/create", json=create_body(p))).status_code == 200
        store = redis.Redis.from_url(world["redis"].url)
        store.flushall()

        async def rewritten() -> bool:
            return store.hlen("interlink-nats:pods") == len(pods)

        await eventually(rewritten, within=20, what="the gateway to rewrite redis")
        gateway.kill()
        gateway.start()
        await wait_healthy(client)
        await check_all_pods_finish_with_right_logs(client, pods)
