"""On a real Slurm the job removes the layout the submitter made, once it ended (``layout.JOB_REMOVES_LAYOUT_ENV``,
set by the backend for every sbatch): the removal's file-system work is the node's, not the login node's submitter's.
The submitter's own removal at its poll then finds nothing left (and still takes what a killed job left)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend
from interlink_nats.submitters.core.backend import BackendState, JobHandle, JobSpec
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir, remove_ended_layout
from interlink_nats.submitters.testing import wait_for
from jobs import pod_dict
from slurm_cluster import SlurmCluster, slurm_for_tests

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


async def test_a_slurm_job_removes_the_layout_the_submitter_made(slurm: SlurmCluster, tmp_path: Path) -> None:
    uid = str(uuid.uuid4())
    pod = pod_dict(uid, {"main": "echo data"}, limits={"cpu": "1", "memory": "32Mi"})
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    job = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    assert job.layout, "the submitter makes this pod's layout"
    job_dir = job_dir_for(tmp_path / "jobs", uid)
    script = prepare_job_dir(job_dir, job.script, job.layout)
    assert (job_dir / layout.VOLUMES_DIR / "scratch").is_dir()
    backend = SlurmBackend()
    spec = JobSpec(uid, job_dir, script, job.resources, tuple(job.backend_flags), "default", "p")
    handle = JobHandle(uid, job_dir, await backend.submit(spec))

    async def ended() -> BackendState | None:
        seen = await backend.poll([handle])
        return seen[uid].state if uid in seen and seen[uid].state.terminal else None

    assert await wait_for(ended, timeout=200, interval=0.3, what="the job to end") is BackendState.COMPLETED
    assert layout.log_path(job_dir, "main").read_text() == "data\n", "it ran with the submitter's layout"
    assert not (job_dir / layout.VOLUMES_DIR).exists() and not (job_dir / layout.ROOTFS_DIR).exists(), (
        "the job removed its volumes and rootfs at exit"
    )
    assert layout.exit_path(job_dir, "main").read_text().strip() == "0", "logs and exit files stay"
    remove_ended_layout(job_dir)  # the submitter's poll afterwards: nothing to take, nothing fails
