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
        # What slurmctld allocated, asked independently of the backend (while the job is still listed).
        st = await until_terminal(client, uids[name])
        assert st.state == pb.JobState.SUCCEEDED, st.message
        shown = slurm.run("squeue", "-h", "-j", job_ids[name], "--states=all", "-o", "%C|%m").stdout.strip()
        alloc_cpus, alloc_mem = shown.split("|")
        assert int(alloc_cpus) == int(cpu)
        assert alloc_mem == f"{int(memory[:-2])}M"
        main = st.containers[0]
        assert main.started_at is not None and main.finished_at is not None
        ran = (main.finished_at - main.started_at).total_seconds()
        assert ran >= RUN_S - 0.5  # the job really ran that long (the container's own clock)

        usage = st.usage
        assert usage is not None
        assert usage.source == pb.UsageSource.ACCOUNTING  # squeue's tres-alloc, not the pod's request
        assert abs(usage.wall_millis / 1000 - ran) <= 0.1 * ran
        cpu_seconds = usage.millicpu_seconds / 1000
        assert abs(cpu_seconds - int(alloc_cpus) * ran) <= 0.1 * int(alloc_cpus) * ran, (cpu_seconds, ran)
        mib_seconds = usage.memory_mib_seconds
        assert abs(mib_seconds - int(memory[:-2]) * ran) <= 0.1 * int(memory[:-2]) * ran, (mib_seconds, ran)
        assert usage.milligpu_seconds == 0
