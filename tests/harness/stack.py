"""A whole interlink-nats stack in the test process: real submitter, real gateway on a real port.

Each stack gets its own pool name and its own durable events consumer, so tests sharing one
nats-server never see each other's pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from interlink_nats.services.gateway.app import Gateway
from interlink_nats.services.gateway.server import running_gateway, serving
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    pool: str
    http: httpx.AsyncClient
    gateway: Gateway
    submitter: Submitter | None
    base_url: str

    async def get(self, path: str, body: Any) -> httpx.Response:
        """interLink sends GET requests with JSON bodies."""
        return await self.http.request("GET", path, json=body)

    async def post(self, path: str, body: Any) -> httpx.Response:
        return await self.http.post(path, json=body)

    async def status_of(self, pod: dict[str, Any]) -> dict[str, Any]:
        response = await self.get("/status", [pod])
        assert response.status_code == 200, response.text
        [status] = response.json()
        return status


def new_pool() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@contextlib.asynccontextmanager
async def gateway_only(
    nats_url: str,
    *,
    default_pool: str | None,
    redis_url: str | None = None,
    durable: str | None = None,
    nats: GatewayNatsSettings | None = None,
    **settings: Any,
) -> AsyncIterator[Stack]:
    config = GatewaySettings(
        nats=nats or GatewayNatsSettings(url=nats_url),
        port=free_port(),
        default_pool=default_pool,
        redis_url=redis_url,
        events_durable=durable or f"gw-{uuid.uuid4().hex[:8]}",
        **settings,
    )
    async with (
        running_gateway(config) as gateway,
        serving(gateway, config),
        httpx.AsyncClient(base_url=(url := f"http://{config.host}:{config.port}"), timeout=30) as http,
    ):
        yield Stack(pool=default_pool or "", http=http, gateway=gateway, submitter=None, base_url=url)


def submitter_settings(nats_url: str, pool: str, state_dir: Path, **extra: Any) -> SubmitterSettings:
    extra.setdefault("build_config", {"runtime": "CONTAINER_RUNTIME_NONE"})
    return SubmitterSettings.load(
        pool=pool,
        backend="shell",
        nats_url=[nats_url],
        state_dir=state_dir,
        poll_interval=0.2,
        announce_interval=5.0,
        **extra,
    )


@contextlib.asynccontextmanager
async def full_stack(
    nats_url: str,
    state_dir: Path,
    *,
    pool: str | None = None,
    redis_url: str | None = None,
    durable: str | None = None,
    site: dict[str, Any] | None = None,
    **gateway_settings: Any,
) -> AsyncIterator[Stack]:
    """A shell submitter (``site``: more of its settings) and a gateway whose default pool it serves."""
    pool = pool or new_pool()
    async with (
        Submitter(submitter_settings(nats_url, pool, state_dir, **(site or {}))) as submitter,
        gateway_only(nats_url, default_pool=pool, redis_url=redis_url, durable=durable, **gateway_settings) as stack,
    ):
        stack.submitter = submitter
        yield stack


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


def pod(
    uid: str | None = None,
    *,
    containers: dict[str, list[str]],
    init: dict[str, list[str]] | None = None,
    name: str = "p",
    pool: str | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose containers run the given argv on the host (runtime none)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": n,
                "image": "busybox",
                "command": argv,
                "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            }
            for n, argv in containers.items()
        ],
    }
    if init:
        spec["initContainers"] = [{"name": n, "image": "busybox", "command": argv} for n, argv in init.items()]
    if pool:
        spec["tolerations"] = [{"key": "pool.vk.io", "operator": "Equal", "value": pool, "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid or str(uuid.uuid4())},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def create_body(p: dict[str, Any]) -> dict[str, Any]:
    """RetrievedPodData as interLink ≥ 0.5 sends it."""
    names = [c["name"] for c in p["spec"].get("initContainers", [])] + [c["name"] for c in p["spec"]["containers"]]
    return {
        "pod": p,
        "container": [
            {"name": n, "configMaps": None, "secrets": None, "projectedvolumemaps": None, "emptyDirs": None}
            for n in names
        ],
        "jobConfig": {"SingularityHubProxy": {"server": "", "master_token": "", "cache_validity_seconds": 0}},
    }


def terminated(status: dict[str, Any]) -> bool:
    return all("terminated" in c["state"] for c in status["initContainers"] + status["containers"])


def logs_body(p: dict[str, Any], container: str, **opts: Any) -> dict[str, Any]:
    base = {
        "Tail": 0,
        "Bytes": 0,
        "Timestamps": False,
        "Follow": False,
        "Previous": False,
        "SinceSeconds": 0,
        "SinceTime": "0001-01-01T00:00:00Z",
    }
    return {
        "Namespace": p["metadata"]["namespace"],
        "PodUID": p["metadata"]["uid"],
        "PodName": p["metadata"]["name"],
        "ContainerName": container,
        "Opts": {**base, **opts},
    }
