"""The controller under test and what its tests share: the Kubernetes stand-in (``emu``), a MasterQueue, a
running controller, a ResourceReport publisher, and waits on what the controller wrote."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import pytest
from interlink_nats.controller import kube, runner
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import resources_subject
from kube_emulator import KubeEmulator

POOL_TIMEOUT = 1.5


RETENTION = 1.0


def masterqueue(nats_url: str, name: str = "mq", **nats_flavor: Any) -> dict[str, Any]:
    flavor = {
        "natsConnector": nats_url,
        "natsSubject": "interlink.resources",
        "virtualNode": "vk",
        "poolRegExp": "^site-",
        "poolTimeout": POOL_TIMEOUT,
        "flavorRetention": RETENTION,
    }
    flavor.update(nats_flavor)
    return {
        "apiVersion": "vk.io/v1",
        "kind": "MasterQueue",
        "metadata": {"name": name},
        "spec": {
            "template": {"cohort": "co"},
            "coveredResources": ["cpu", "memory"],
            "flavors": [
                {
                    "name": "hpc",
                    "natsFlavor": flavor,
                    "nominalQuota": {"cpu": "100"},
                    "canLendTo": [{"queue": f"{name}-borrower", "lendingLimit": {"cpu": "4"}}],
                }
            ],
        },
    }


def quotas(emu: KubeEmulator, queue: str = "mq") -> dict[str, str]:
    """Flavor → cpu quota of a ClusterQueue in the emulator."""
    obj = emu.get("ClusterQueue", queue)
    if obj is None:
        return {}
    groups = obj["spec"]["resourceGroups"]
    return {f["name"]: f["resources"][0]["nominalQuota"] for g in groups for f in g["flavors"]}


async def eventually(check: Callable[[], bool], within: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)


async def listening(controller: runner.Controller, *names: str) -> None:
    """Until the controller watches these MasterQueues and is subscribed to their NATS sources, with the
    first Describe round over: a report published from now on reaches it."""

    def ready() -> bool:
        states = [controller.mqs.get(name) for name in names]
        return all(
            state is not None
            and state.parsed is not None
            and all(controller.hub.primed(source) for source in state.parsed.sources())
            for state in states
        )

    await eventually(ready, what=f"the subscriptions of {', '.join(names)}")


@contextlib.asynccontextmanager
async def running_controller(emu: KubeEmulator, **settings: Any) -> AsyncIterator[runner.Controller]:
    api = kube.LightkubeApi.from_server(emu.url)
    options: dict[str, Any] = {"tick_s": 0.1, "describe_timeout_s": 1.0, "status_refresh_s": 0.5}
    options.update(settings)
    controller = runner.Controller(api, settings=runner.Settings(**options))
    task = asyncio.ensure_future(controller.run())
    try:
        yield controller
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
async def publisher(nats_url: str) -> AsyncIterator[Callable[[pb.ResourceReport], Awaitable[None]]]:
    nc = await nats.connect(nats_url)

    async def publish(message: pb.ResourceReport) -> None:
        await nc.publish(resources_subject(message.pool), bytes(message))
        await nc.flush()

    yield publish
    await nc.close()
