"""The controller end to end: Kubernetes API emulator (real HTTP, lightkube client), real nats-server,
pools announcing ResourceReports and answering ``Describe`` through the project's RPC server."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable

import nats
from controller_stack import (
    POOL_TIMEOUT,
    RETENTION,
    emu,  # noqa: F401  (a fixture, named by the tests' parameters)
    eventually,
    listening,
    masterqueue,
    publisher,  # noqa: F401  (a fixture)
    quotas,
    running_controller,
)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import RpcServer
from kube_emulator import KubeEmulator


def report(pool: str, cpu: str = "64", memory: str = "256Gi") -> pb.ResourceReport:
    return pb.ResourceReport(
        pool=pool,
        capacity={"cpu": cpu, "memory": memory},
        backend="shell",
        interval_seconds=30,
        reported_at=dt.datetime.now(dt.UTC),
    )


class DescribingPool(pb.SubmitterServiceBase):
    """A submitter that only answers Describe (what the controller asks at start)."""

    def __init__(self, pool: str, cpu: str = "64") -> None:
        self.pool, self.cpu, self.calls = pool, cpu, 0

    async def describe(self, message: pb.DescribeRequest) -> pb.DescribeResponse:
        self.calls += 1
        return pb.DescribeResponse(pool=self.pool, resources=report(self.pool, self.cpu), backend="shell")


async def test_flavors_and_queues_follow_reports_capacity_and_timeouts(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url))
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a"))
        await publisher(report("site-b", cpu="500"))
        await publisher(report("other"))  # not selected by ^site-
        await eventually(lambda: quotas(emu) == {"mq-hpc-site-a": "64", "mq-hpc-site-b": "100"}, what="quotas")
        assert emu.names("ResourceFlavor") == ["mq-hpc-site-a", "mq-hpc-site-b"]
        rf = emu.get("ResourceFlavor", "mq-hpc-site-a")
        assert rf["spec"]["tolerations"][0]["value"] == "site-a"
        assert rf["metadata"]["ownerReferences"][0]["uid"] == emu.get("MasterQueue", "mq")["metadata"]["uid"]
        await eventually(lambda: quotas(emu, "mq-borrower") == {"mq-hpc-site-a": "0", "mq-hpc-site-b": "0"})
        await eventually(lambda: emu.get("MasterQueue", "mq").get("status", {}).get("poolsLive") == 2, what="status")
        status = emu.get("MasterQueue", "mq")["status"]
        assert {p["name"]: p["state"] for p in status["pools"]} == {"site-a": "Live", "site-b": "Live"}

        # capacity change follows; site-b keeps announcing, site-a goes silent
        await publisher(report("site-a", cpu="8"))
        await eventually(lambda: quotas(emu).get("mq-hpc-site-a") == "8", what="capacity change")

        async def keep_b() -> None:
            while True:
                await publisher(report("site-b", cpu="500"))
                await asyncio.sleep(0.3)

        keeper = asyncio.ensure_future(keep_b())
        try:
            await eventually(lambda: list(quotas(emu)) == ["mq-hpc-site-b"], within=POOL_TIMEOUT + 3, what="drop")
            assert "mq-hpc-site-a" in emu.names("ResourceFlavor")  # kept during flavorRetention
            await eventually(
                lambda: emu.names("ResourceFlavor") == ["mq-hpc-site-b"], within=RETENTION + 3, what="flavor deletion"
            )
            assert list(quotas(emu, "mq-borrower")) == ["mq-hpc-site-b"]

            def reasons() -> set[str]:
                return {e["reason"] for e in (o for k, o in emu.objects.items() if k[1] == "events")}

            # The flavor's deletion is written before the event that says so: wait for the event, not the object.
            await eventually(lambda: {"PoolLive", "PoolTimedOut", "FlavorDeleted"} <= reasons(), what="events")
        finally:
            keeper.cancel()
    assert not emu.rejected


async def test_nothing_changed_means_no_writes(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, poolTimeout=30))
    async with running_controller(emu, status_refresh_s=60) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a"))
        await eventually(lambda: "mq-hpc-site-a" in quotas(emu), what="first apply")
        await eventually(lambda: "status" in emu.get("MasterQueue", "mq"), what="first status")
        await controller.step()  # whatever the first passes left to write
        before = len(emu.writes)
        for _ in range(5):  # heartbeats with the same capacity
            received = controller.store.received
            await publisher(report("site-a"))
            await eventually(lambda: controller.store.received > received, what="the heartbeat")  # noqa: B023
        assert await controller.step() == 0
        assert len(emu.writes) == before, [w for w in emu.writes[before:]]


async def test_restart_does_not_drop_quota_because_pools_describe_themselves(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    pools = {name: DescribingPool(name) for name in ("site-a", "site-b")}
    nc = await nats.connect(nats_url)
    servers = [RpcServer(nc, [svc], pool=name) for name, svc in pools.items()]
    for server in servers:
        await server.start()
    try:
        emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, poolTimeout=30))
        async with running_controller(emu):
            await eventually(lambda: len(quotas(emu)) == 2, what="pools known from Describe at first start")
            await eventually(lambda: emu.get("MasterQueue", "mq").get("status", {}).get("poolsLive") == 2)
        assert all(p.calls >= 1 for p in pools.values())
        # Forget the status too, so only Describe can tell the new controller about the pools.
        body = emu.get("MasterQueue", "mq")
        body.pop("status", None)
        kueue_writes = emu.writes_of(("ResourceFlavor", "ClusterQueue"))
        snapshot = quotas(emu)
        async with running_controller(emu) as controller:
            await eventually(lambda: controller.synced.is_set(), what="first pass after restart")
            await listening(controller, "mq")
            await controller.step()  # a full pass with what the pools described
            assert quotas(emu) == snapshot
        assert emu.writes_of(("ResourceFlavor", "ClusterQueue")) == kueue_writes  # no Hold, no drop, no delete
        assert not any(w.method == "DELETE" for w in emu.writes)
    finally:
        for server in servers:
            await server.stop(grace_s=0)
        await nc.close()


async def test_restart_keeps_pools_from_status_when_nobody_answers_describe(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, poolTimeout=30))
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a"))
        await eventually(lambda: emu.get("MasterQueue", "mq").get("status", {}).get("poolsLive") == 1)
    kueue_writes = emu.writes_of(("ResourceFlavor", "ClusterQueue"))
    async with running_controller(emu, describe_timeout_s=0.2) as controller:
        await eventually(lambda: controller.synced.is_set(), what="first pass after restart")
        await listening(controller, "mq")
        await controller.step()  # a full pass after the Describe round nobody answered
    assert "mq-hpc-site-a" in quotas(emu)
    assert emu.writes_of(("ResourceFlavor", "ClusterQueue")) == kueue_writes


async def test_kueue_v1beta1_only_cluster_gets_v1beta1_objects(
    nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    async with KubeEmulator(served={"kueue.x-k8s.io": ["v1beta1"], "vk.io": ["v1"]}) as emu:
        emu.put_object("vk.io", "masterqueues", masterqueue(nats_url))
        async with running_controller(emu) as controller:
            await listening(controller, "mq")
            await publisher(report("site-a"))
            await eventually(lambda: "mq-hpc-site-a" in quotas(emu), what="v1beta1 apply")
            await eventually(lambda: "status" in emu.get("MasterQueue", "mq"), what="status")
        queue = emu.get("ClusterQueue", "mq")
        assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        assert queue["spec"]["cohort"] == "co"
        assert emu.get("MasterQueue", "mq")["status"]["kueueAPIVersion"] == "v1beta1"
        assert not emu.rejected


async def test_deleting_the_masterqueue_removes_its_queues_and_flavors(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, poolTimeout=30))
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a"))
        await eventually(lambda: "mq-hpc-site-a" in quotas(emu))
        emu.delete_object("vk.io", "masterqueues", "mq")
        await eventually(lambda: not emu.names("ClusterQueue") and not emu.names("ResourceFlavor"), what="cleanup")


async def test_two_masterqueues_share_one_subscription_and_an_invalid_one_reports_its_error(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, "one", poolTimeout=30))
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, "two", poolTimeout=30))
    bad = masterqueue(nats_url, "bad")
    bad["spec"]["template"] = {}
    emu.put_object("vk.io", "masterqueues", bad)
    async with running_controller(emu) as controller:
        await listening(controller, "one", "two")
        await publisher(report("site-a"))
        await eventually(lambda: "one-hpc-site-a" in quotas(emu, "one") and "two-hpc-site-a" in quotas(emu, "two"))
        assert sum(len(c.sources) for c in controller.hub._connections.values()) == 1
        await eventually(lambda: "status" in emu.get("MasterQueue", "bad"))
        condition = emu.get("MasterQueue", "bad")["status"]["conditions"][0]
        assert condition["reason"] == "InvalidSpec"
        assert "cohort" in condition["message"]


async def test_a_queue_owned_by_someone_else_is_left_alone(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    foreign = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "mq-borrower"},
        "spec": {"namespaceSelector": {}, "resourceGroups": []},
    }
    emu.put_object("kueue.x-k8s.io", "clusterqueues", foreign)
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url, poolTimeout=30))
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a"))
        await eventually(lambda: "mq-hpc-site-a" in quotas(emu))
        await controller.step()  # one more full pass: still leaves the foreign queue alone
    assert emu.get("ClusterQueue", "mq-borrower")["spec"] == foreign["spec"]
    reasons = {o["reason"] for k, o in emu.objects.items() if k[1] == "events"}
    assert "QueueConflict" in reasons


async def test_nats_credentials_can_come_from_a_secret(
    emu: KubeEmulator, nats_url: str, publisher: Callable[[pb.ResourceReport], Awaitable[None]]
) -> None:
    import base64

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "nats-creds", "namespace": "kueue-nats"},
        "data": {"url": base64.b64encode(nats_url.encode()).decode()},
    }
    emu.put_object("", "secrets", secret, namespace="kueue-nats")
    body = masterqueue("nats://127.0.0.1:1", poolTimeout=30)  # unreachable unless the Secret's url is used
    body["spec"]["flavors"][0]["natsFlavor"]["natsSecretRef"] = {"name": "nats-creds", "namespace": "kueue-nats"}
    emu.put_object("vk.io", "masterqueues", body)
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a"))
        await eventually(lambda: "mq-hpc-site-a" in quotas(emu), what="report through the Secret's connection")
