"""Live capacity end to end: real nats-server, the Kubernetes API emulator standing in for the API
server and Kueue (a ClusterQueue's ``status.flavorsReservation`` is what Kueue would write), real submitters.

- ``capacity: Free``: a pool's quota is what its admitted workloads use plus what is free at its site;
- a pool whose backend refuses every submission goes ``Failing``, gets no new work (quota held at what it
  uses), says why in status and an Event, and opens again once its submissions succeed.
The real-Slurm version of "free capacity follows the site" is tests/backends/slurm/test_capacity_slurm.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from controller_capacity import pool_row
from controller_stack import emu, eventually, listening, masterqueue, publisher, quotas, running_controller
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core.backend import SubmitRejected
from interlink_nats.submitters.core.errors import Refused
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import FakeBackend, settings_for
from kube_emulator import KubeEmulator

__all__ = ["emu", "publisher"]  # fixtures

Publish = Callable[[pb.ResourceReport], Awaitable[None]]


def free_masterqueue(nats_url: str, **policy: Any) -> dict[str, Any]:
    body = masterqueue(nats_url, capacity="Free", capacityPolicy=policy)
    body["spec"]["flavors"][0]["nominalQuota"] = {"cpu": "100"}
    return body


def report(pool: str, *, free: str | None, queued: int = 0) -> pb.ResourceReport:
    return pb.ResourceReport(
        pool=pool,
        capacity={"cpu": "64", "memory": "256Gi"},
        free={"cpu": free, "memory": "100Gi"} if free is not None else {},
        queued_jobs=queued,
        oldest_pending_seconds=5 if queued else 0,
        backend="slurm",
        interval_seconds=30,
        reported_at=dt.datetime.now(dt.UTC),
    )


def kueue_reserves(emu: KubeEmulator, flavor: str, cpu: str) -> None:
    """What Kueue writes when it admitted workloads holding ``cpu`` of the flavor."""
    cq = emu.get("ClusterQueue", "mq")
    assert cq is not None
    cq["status"] = {"flavorsReservation": [{"name": flavor, "resources": [{"name": "cpu", "total": cpu}]}]}
    emu.put_object("kueue.x-k8s.io", "clusterqueues", cq)


def event_reasons(emu: KubeEmulator) -> set[str]:
    return {o["reason"] for k, o in emu.objects.items() if k[1] == "events"}


async def test_free_policy_gives_used_plus_free_and_holds_a_saturated_pool(
    emu: KubeEmulator, nats_url: str, publisher: Publish
) -> None:
    emu.put_object("vk.io", "masterqueues", free_masterqueue(nats_url, minIntervalSeconds=0, maxQueuedJobs=2))
    flavor = "mq-hpc-site-a"
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a", free="10"))
        await eventually(lambda: quotas(emu).get(flavor) == "10", what="quota = free (nothing used yet)")

        kueue_reserves(emu, flavor, "6")  # Kueue admitted 6 CPUs of work there
        await publisher(report("site-a", free="4"))  # ...which now runs at the site
        await eventually(lambda: quotas(emu).get(flavor) == "10", what="quota = used 6 + free 4")
        await publisher(report("site-a", free="0"))  # another user took the rest
        await eventually(lambda: quotas(emu).get(flavor) == "6", what="quota = used 6 + free 0")

        await publisher(report("site-a", free="20", queued=3))  # its jobs wait at the site: saturated
        await eventually(lambda: pool_row(emu, "site-a").get("admission") == "Saturated", what="Saturated")
        assert quotas(emu)[flavor] == "6"
        assert "PoolSaturated" in event_reasons(emu)
        await publisher(report("site-a", free="20", queued=0))  # drained: open again
        await eventually(lambda: quotas(emu).get(flavor) == "26", what="open again: used 6 + free 20")
        # the ClusterQueue's quota and the MasterQueue's status are two writes: wait for the status too
        await eventually(lambda: pool_row(emu, "site-a").get("admission") == "Open", what="status says Open")
        assert pool_row(emu, "site-a")["used"] == {"cpu": "6"}


async def test_a_pool_whose_backend_refuses_every_submit_goes_failing_and_recovers(
    emu: KubeEmulator, nats_url: str, tmp_path: Path
) -> None:
    body = free_masterqueue(nats_url, minAttempts=3, backoffSeconds=2)
    body["spec"]["flavors"][0]["natsFlavor"]["poolTimeout"] = 30  # the submitter announces every 2 s
    emu.put_object("vk.io", "masterqueues", body)
    backend = FakeBackend()
    settings = settings_for(tmp_path / "state", nats_url, pool="site-f", announce_interval_s=0.5)
    flavor = "mq-hpc-site-f"

    def job() -> pb.JobScript:
        uid = str(uuid.uuid4())
        return pb.JobScript(pod=pb.PodRef(uid=uid, namespace="ns", name="p"), containers=["main"], script="true\n")

    async with running_controller(emu) as controller, Submitter(settings, backend=backend) as submitter:
        await listening(controller, "mq")
        await eventually(lambda: quotas(emu).get(flavor) not in (None, "0"), within=30, what="the pool's quota")
        backend.fail("submit", SubmitRejected("sbatch: error: Batch job submission failed"), times=3)
        for _ in range(3):
            with pytest.raises(Refused):
                await submitter.submissions.submit(job())
        await eventually(lambda: pool_row(emu, "site-f").get("admission") == "Failing", within=30, what="Failing")
        assert quotas(emu)[flavor] == "0"  # held at what it uses: Kueue admits nothing more there
        assert "3 of its last 3" in pool_row(emu, "site-f")["reason"]
        assert "PoolFailing" in event_reasons(emu)

        # the back-off ends: the pool may try again; its submissions succeed now, so it stays open
        await eventually(lambda: pool_row(emu, "site-f").get("admission") == "Open", within=30, what="probing")
        for _ in range(4):
            await submitter.submissions.submit(job())
        await eventually(lambda: quotas(emu).get(flavor) not in (None, "0"), within=30, what="quota back")
        assert "PoolOpen" in event_reasons(emu)
        assert pool_row(emu, "site-f")["admission"] == "Open"


async def test_a_restarted_controller_keeps_a_failing_pool_held_for_its_back_off(
    emu: KubeEmulator, nats_url: str, publisher: Publish
) -> None:
    body = free_masterqueue(nats_url, backoffSeconds=8)  # long enough for a loaded machine to see the hold
    body["spec"]["flavors"][0]["natsFlavor"]["poolTimeout"] = 30
    body["status"] = {  # what the previous controller wrote
        "pools": [
            {
                "name": "site-a",
                "flavorGroup": "hpc",
                "resourceFlavor": "mq-hpc-site-a",
                "state": "Live",
                "lastReport": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "capacity": {"cpu": "64"},
                "admission": "Failing",
                "reason": "3 of its last 3 submissions/starts failed; no new work for 30s",
                "quota": {"cpu": "0", "memory": "0"},
            }
        ]
    }
    emu.put_object("vk.io", "masterqueues", body)
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(report("site-a", free="10"))  # nothing failed lately: no reason of its own to hold it
        await eventually(lambda: quotas(emu).get("mq-hpc-site-a") is not None, what="the pool's flavor")
        assert quotas(emu)["mq-hpc-site-a"] == "0"
        assert pool_row(emu, "site-a").get("admission") == "Failing"
        await eventually(lambda: quotas(emu).get("mq-hpc-site-a") == "10", within=30, what="open after the back-off")
