"""The last hour's usage per pool in the MasterQueue's status: a real shell submitter runs jobs of known size,
announces what its ended jobs used, and the controller (against the Kubernetes API emulator, with its CRD
validation on write) shows it in ``status.pools[].usageLastHour``; a hostile pool's figures are clamped."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from controller_stack import emu, eventually, listening, masterqueue, publisher, running_controller
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from kube_emulator import KubeEmulator

__all__ = ["emu", "publisher"]  # fixtures

Publish = Callable[[pb.ResourceReport], Awaitable[None]]
TERMINAL = {pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST}


def pool_row(emu: KubeEmulator, pool: str) -> dict[str, Any]:
    status = (emu.get("MasterQueue", "mq") or {}).get("status") or {}
    return next((row for row in status.get("pools") or [] if row["name"] == pool), {})


async def test_a_pools_ended_jobs_show_as_its_last_hours_usage_in_the_masterqueue_status(
    emu: KubeEmulator, nats_url: str, tmp_path: Path
) -> None:
    body = masterqueue(nats_url)
    body["spec"]["flavors"][0]["natsFlavor"]["poolTimeout"] = 30
    emu.put_object("vk.io", "masterqueues", body)
    settings = settings_for(tmp_path / "state", nats_url, pool="site-u", announce_interval_s=0.5)
    nc = await nats.connect(nats_url)
    try:
        async with running_controller(emu) as controller, Submitter(settings):
            await listening(controller, "mq")
            client = submitter_client(nc, "site-u", timeout=30)
            uids = []
            for cpu, memory in (("1", "32Mi"), ("250m", "16Mi")):
                uid = str(uuid.uuid4())
                job = pod_job(uid, {"main": "sleep 0.5"}, limits={"cpu": cpu, "memory": memory})
                await client.submit(pb.SubmitRequest(job=job))
                uids.append(uid)

            async def ended() -> list[pb.JobStatus] | None:
                got = (await client.get_status(pb.GetStatusRequest(pod_uids=uids))).statuses
                return got if all(s.state in TERMINAL for s in got) else None

            statuses = await wait_for(ended, timeout=60, what="both jobs to end")
            usages = [s.usage for s in statuses]
            assert all(u is not None and u.source == pb.UsageSource.ALLOCATION for u in usages)
            cpu_s = sum(u.millicpu_seconds for u in usages if u) / 1000
            mem_bs = sum(u.memory_mib_seconds for u in usages if u) * 2**20
            assert cpu_s > 0.5 * 1.25  # each slept 0.5 s: at least 1.25 CPUs x 0.5 s

            def shown() -> bool:
                figures = pool_row(emu, "site-u").get("usageLastHour") or {}
                return figures.get("cpuSeconds") == round(cpu_s)

            await eventually(shown, within=30, what="the pool's usage in the MasterQueue's status")
            figures = pool_row(emu, "site-u")["usageLastHour"]
            assert figures == {
                "cpuSeconds": round(cpu_s),
                "memoryByteSeconds": mem_bs,
                "gpuSeconds": 0,
                "windowSeconds": 3600,
            }
            assert "refused" not in pool_row(emu, "site-u")
    finally:
        await nc.close()


async def test_a_hostile_pools_usage_is_shown_clamped_and_refused_by_name(
    emu: KubeEmulator, nats_url: str, publisher: Publish
) -> None:
    emu.put_object("vk.io", "masterqueues", masterqueue(nats_url))
    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await publisher(
            pb.ResourceReport(
                pool="site-h",
                capacity={"cpu": "4", "memory": "8Gi"},
                backend="slurm",
                interval_seconds=30,
                reported_at=dt.datetime.now(dt.UTC),
                usage_recent=pb.JobUsage(
                    millicpu_seconds=-1, memory_mib_seconds=2**62, milligpu_seconds=5_000, wall_millis=10_000
                ),
                usage_window_seconds=3600,
            )
        )
        await eventually(lambda: "usageLastHour" in pool_row(emu, "site-h"), what="the pool's usage shown")
        row = pool_row(emu, "site-h")
        assert row["usageLastHour"] == {
            "cpuSeconds": 0,  # negative
            "memoryByteSeconds": 8 * 2**30 * 10,  # 8 GiB for the 10 s its jobs ran, at most
            "gpuSeconds": 0,  # it has no GPU
            "windowSeconds": 3600,
        }
        assert set(row["refused"]) == {"usage.cpu", "usage.memory", "usage.gpu"}
        assert "negative" in row["refused"]["usage.cpu"]
