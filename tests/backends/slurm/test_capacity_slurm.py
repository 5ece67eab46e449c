"""Live capacity against a real one-node Slurm (``pytest -m slurm``): jobs of "another user" submitted
straight to the partition take its CPUs; the pool's report shows its free capacity shrink and grow back, and the
controller's quota (``capacity: Free``; Kueue emulated by the API emulator, tests/harness/kube_emulator.py)
follows within one report interval plus the smoothing interval. A pool job that cannot start makes the pool
Saturated until it does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from controller_capacity import pool_row
from controller_stack import emu, eventually, listening, masterqueue, quotas, running_controller
from interlink_nats.submitters.edge.announcer import CONFIG_CHECK_INTERVAL
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for
from jobs import pod_job
from kube_emulator import KubeEmulator
from slurm_cluster import SlurmCluster
from slurm_stack import slurm

__all__ = ["emu", "slurm"]  # fixtures

pytestmark = pytest.mark.slurm

ANNOUNCE_S = 1.0
SMOOTHING_S = 2.0
REPORT_INTERVAL_S = max(ANNOUNCE_S, CONFIG_CHECK_INTERVAL)
SLACK_S = 10.0
"""sinfo, NATS and a reconcile pass on a loaded 2-core machine; the figure asserted is interval + smoothing + this."""


@pytest.fixture
async def pool(slurm: SlurmCluster, tmp_path: Path, nats_url: str) -> AsyncIterator[Submitter]:
    name = f"slurm{uuid.uuid4().hex[:8]}"
    settings = settings_for(
        tmp_path / "state", nats_url, pool=name, backend="slurm", poll_interval_s=0.5, announce_interval_s=ANNOUNCE_S
    )
    async with Submitter(settings) as submitter:
        yield submitter


def other_user_job(slurm: SlurmCluster, cpus: int) -> str:
    """A job submitted straight to the partition, not through the pool: someone else's."""
    done = slurm.run(
        "sbatch",
        "--parsable",
        "-J",
        "other-user",
        "-o",
        "/dev/null",
        "-c",
        str(cpus),
        "--mem=64",
        "--wrap",
        "sleep 600",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


async def running(slurm: SlurmCluster, job_id: str) -> None:
    await eventually(
        lambda: slurm.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() == "RUNNING",
        within=60,
        what=f"Slurm job {job_id} to run",
    )


async def timed(check: object, what: str) -> float:
    start = time.monotonic()
    await eventually(check, within=120, what=what)  # type: ignore[arg-type]
    return time.monotonic() - start


async def test_free_capacity_and_the_quota_follow_another_users_jobs(
    slurm: SlurmCluster, pool: Submitter, emu: KubeEmulator, nats_url: str
) -> None:
    name = pool.pool
    body = masterqueue(
        nats_url,
        pools=[name],
        poolTimeout=60,
        capacity="Free",
        capacityPolicy={"minIntervalSeconds": SMOOTHING_S, "minChangeFraction": 0.1, "maxPendingSeconds": 1},
    )
    del body["spec"]["flavors"][0]["natsFlavor"]["poolRegExp"]
    body["spec"]["flavors"][0]["nominalQuota"] = {"cpu": "1000"}
    emu.put_object("vk.io", "masterqueues", body)
    flavor = f"mq-hpc-{name}"
    cpus = slurm.cpus
    bound = REPORT_INTERVAL_S + SMOOTHING_S + SLACK_S

    async with running_controller(emu) as controller:
        await listening(controller, "mq")
        await eventually(lambda: quotas(emu).get(flavor) == str(cpus), within=60, what="the whole partition free")

        other = other_user_job(slurm, 1)
        await running(slurm, other)
        took = await timed(lambda: quotas(emu).get(flavor) == str(cpus - 1), "the quota to shrink by one CPU")
        assert pool.announcer.resource_report().free["cpu"] == str(cpus - 1)
        assert took <= bound, f"quota followed after {took:.1f}s (bound {bound:.0f}s)"

        slurm.run("scancel", other)
        took = await timed(lambda: quotas(emu).get(flavor) == str(cpus), "the quota to grow back")
        assert took <= bound, f"quota followed after {took:.1f}s (bound {bound:.0f}s)"

        # the whole partition taken: the pool's own job waits at the site → Saturated, quota held at its use
        hog = other_user_job(slurm, cpus)
        await running(slurm, hog)
        await pool.submissions.submit(pod_job(str(uuid.uuid4()), {"main": "true"}, limits={"cpu": "1"}))
        await eventually(lambda: pool_row(emu, name).get("admission") == "Saturated", within=60, what="Saturated")
        assert quotas(emu)[flavor] == "0"
        assert pool.announcer.resource_report().queued_jobs == 1
        slurm.run("scancel", hog)
        await eventually(lambda: pool_row(emu, name).get("admission") == "Open", within=60, what="drained: Open")
        await eventually(lambda: quotas(emu).get(flavor) == str(cpus), within=60, what="the quota back")
