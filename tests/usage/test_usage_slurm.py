"""Usage of real Slurm jobs of known size and length: what the submitter reports on the ended status is what
slurmctld allocated times how long the job ran (``pytest -m slurm``; the cluster is started by the fixture)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from slurm_cluster import SlurmCluster, slurm_for_tests

pytestmark = pytest.mark.slurm

TERMINAL = {pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST}
RUN_S = 12
"""Long enough that Slurm's whole-second start and end times are within 10 % of the run time."""


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


@pytest.fixture
async def client(slurm: SlurmCluster, tmp_path: Path, nats_url: str) -> AsyncIterator[pb.SubmitterServiceStub]:
    pool = f"usage{uuid.uuid4().hex[:8]}"
    settings = settings_for(tmp_path / "state", nats_url, pool=pool, backend="slurm", poll_interval=0.5)
    async with Submitter(settings):
        nc = await nats.connect(nats_url)
        yield submitter_client(nc, pool, timeout=30)
        await nc.close()


async def until_terminal(client: pb.SubmitterServiceStub, uid: str) -> pb.JobStatus:
    async def check() -> pb.JobStatus | None:
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[uid]))).statuses[0]
        return st if st.state in TERMINAL else None

    return await wait_for(check, timeout=120, interval=0.25, what=f"pod {uid} to end")


async def test_the_cpu_and_memory_seconds_of_real_jobs_are_their_allocation_times_their_run_time(
    client: pb.SubmitterServiceStub, slurm: SlurmCluster
) -> None:
    sizes = {"one": ("1", "96Mi"), "two": ("2", "160Mi")}  # 3 CPUs on 2: the second waits, as on a busy site
    uids: dict[str, str] = {}
    job_ids: dict[str, str] = {}
    for name, (cpu, memory) in sizes.items():
        uids[name] = str(uuid.uuid4())
        job = pod_job(uids[name], {"main": f"sleep {RUN_S}"}, limits={"cpu": cpu, "memory": memory})
        job_ids[name] = (await client.submit(pb.SubmitRequest(job=job))).job_id
    for name, (cpu, memory) in sizes.items():
        st = await until_terminal(client, uids[name])
        assert st.state == pb.JobState.SUCCEEDED, st.message
        # What slurmctld allocated and how long the job ran, asked of Slurm here, apart from the backend's poll.
        alloc_cpus, alloc_mib, elapsed = slurm_record(slurm, job_ids[name])
        assert (alloc_cpus, alloc_mib) == (int(cpu), int(memory.removesuffix("Mi")))
        assert RUN_S <= elapsed <= RUN_S + 15  # a job of known length (its script's start-up on a loaded host)
        main = st.containers[0]
        assert main.started_at is not None and main.finished_at is not None
        assert (main.finished_at - main.started_at).total_seconds() >= RUN_S - 0.5  # the container's own clock

        usage = st.usage
        assert usage is not None
        assert usage.source == pb.UsageSource.ACCOUNTING  # squeue's tres-alloc, not the pod's request
        assert abs(usage.wall_millis / 1000 - elapsed) <= 0.1 * elapsed
        cpu_seconds = usage.millicpu_seconds / 1000
        assert abs(cpu_seconds - alloc_cpus * elapsed) <= 0.1 * alloc_cpus * elapsed, (cpu_seconds, elapsed)
        mib_seconds = usage.memory_mib_seconds
        assert abs(mib_seconds - alloc_mib * elapsed) <= 0.1 * alloc_mib * elapsed, (mib_seconds, elapsed)
        assert usage.milligpu_seconds == 0
        print(f"{name}: {alloc_cpus} CPUs {alloc_mib} MiB for {elapsed} s: {cpu_seconds} CPU-s, {mib_seconds} MiB-s")


def slurm_record(slurm: SlurmCluster, job_id: str) -> tuple[int, int, int]:
    """(CPUs, MiB, run seconds) of an ended job, from ``scontrol show job -o`` (it keeps the job MinJobAge seconds)."""
    fields = dict(
        item.split("=", 1) for item in slurm.run("scontrol", "show", "job", "-o", job_id).stdout.split() if "=" in item
    )
    hours, minutes, seconds = (int(x) for x in fields["RunTime"].split(":"))
    tres = dict(item.split("=", 1) for item in fields["TRES"].split(","))
    assert tres["mem"].endswith("M"), tres
    return int(fields["NumCPUs"]), int(tres["mem"][:-1]), hours * 3600 + minutes * 60 + seconds
