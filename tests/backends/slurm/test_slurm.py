"""The slurm submitter against a real one-node Slurm started by the fixture (``pytest -m slurm``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.sbatch_grammar import DEFAULT_ALLOWED
from interlink_nats.kernel.subjects import events_subject
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend
from interlink_nats.submitters.core.backend import JobHandle
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_dict, pod_job
from slurm_cluster import SlurmCluster
from slurm_stack import nc as nc
from slurm_stack import pool as pool
from slurm_stack import slurm as slurm
from slurm_stack import status_of, until_terminal

pytestmark = pytest.mark.slurm

Phase = pb.ContainerPhase


@pytest.fixture
async def submitter(slurm: SlurmCluster, tmp_path: Path, nats_url: str, pool: str) -> AsyncIterator[Submitter]:
    settings = settings_for(tmp_path / "state", nats_url, pool=pool, backend="slurm", poll_interval=0.5)
    async with Submitter(settings) as s:
        yield s


@pytest.fixture
async def client(nats_url: str, pool: str) -> AsyncIterator[pb.SubmitterServiceStub]:
    nc = await nats.connect(nats_url)
    yield submitter_client(nc, pool, timeout=30)
    await nc.close()


async def test_a_job_runs_through_slurm_with_exact_exit_codes_logs_and_events(
    submitter: Submitter,
    client: pb.SubmitterServiceStub,
    slurm: SlurmCluster,
    tmp_path: Path,
    nc: nats.NATS,
    pool: str,
) -> None:
    events = await nc.jetstream().subscribe(events_subject(pool), ordered_consumer=True)
    u = str(uuid.uuid4())
    gate = tmp_path / "gate"
    job = pod_job(
        u,
        {
            "main": f"echo one; echo two; while [ ! -e {gate} ]; do sleep 0.1; done; echo three; exit 3",
            "side": "echo side",
        },
        init={"prep": "echo prep"},
        limits={"cpu": "1", "memory": "64Mi"},
    )
    resp = await client.submit(pb.SubmitRequest(job=job))
    assert resp.created
    assert resp.job_id.isdigit()
    assert job.resources.cpu_millis == 2000  # main + side run at once: their limits add up
    squeue = slurm.run("squeue", "-h", "-j", resp.job_id, "-o", "%j|%m")
    assert squeue.stdout.strip() == f"{u}|{job.resources.memory_bytes // 2**20}M"

    async def main_running() -> pb.JobStatus | None:
        st = await status_of(client, u)
        return st if st.state == pb.JobState.RUNNING and st.containers[1].phase == Phase.RUNNING else None

    st = await wait_for(main_running, timeout=30, what="the main container to run")
    assert [c.name for c in st.containers] == ["prep", "main", "side"]
    assert st.containers[0].phase == Phase.TERMINATED
    assert st.containers[0].exit_code == 0

    async def two_lines() -> bytes | None:
        data = b"".join([c.data async for c in client.get_logs(pb.GetLogsRequest(pod_uid=u, container="main"))])
        return data if data.count(b"\n") >= 2 else None

    assert await wait_for(two_lines, what="logs while running") == b"one\ntwo\n"
    gate.touch()
    st = await until_terminal(client, u)
    assert st.state == pb.JobState.FAILED
    assert [(c.name, c.phase, c.exit_code) for c in st.containers] == [
        ("prep", Phase.TERMINATED, 0),
        ("main", Phase.TERMINATED, 3),
        ("side", Phase.TERMINATED, 0),
    ]
    after = b"".join([c.data async for c in client.get_logs(pb.GetLogsRequest(pod_uid=u, container="main"))])
    assert after == b"one\ntwo\nthree\n"

    seen: list[pb.JobState] = []

    async def terminal_event() -> bool:
        try:
            while True:
                ev = pb.JobEvent.parse((await events.next_msg(timeout=0.2)).data)
                if ev.status.pod.uid == u and (not seen or seen[-1] != ev.status.state):
                    seen.append(ev.status.state)
        except nats.errors.TimeoutError:
            pass
        return bool(seen) and seen[-1] == pb.JobState.FAILED

    await wait_for(terminal_event, what="the FAILED event")
    await events.unsubscribe()  # an ordered consumer's heartbeat task ends only with its subscription
    assert seen[0] in (pb.JobState.PENDING, pb.JobState.RUNNING)
    assert pb.JobState.RUNNING in seen


async def test_cancel_scancels_the_job_and_removes_its_files(
    submitter: Submitter, client: pb.SubmitterServiceStub, slurm: SlurmCluster
) -> None:
    u = str(uuid.uuid4())
    resp = await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "sleep 300"})))

    async def running() -> bool:
        return (await status_of(client, u)).containers[0].phase == Phase.RUNNING

    await wait_for(running, timeout=30, what="the container to run")
    cancelled = await client.cancel(pb.CancelRequest(pod_uid=u))
    assert cancelled.found
    assert cancelled.status.state == pb.JobState.CANCELLED
    assert not (submitter.state_dir / "jobs" / u).exists()

    async def gone_from_slurm() -> bool:
        out = slurm.run("squeue", "-h", "--states=all", "-j", resp.job_id, "-o", "%T").stdout.strip()
        return out in ("CANCELLED", "")

    await wait_for(gone_from_slurm, what="slurm to cancel the job")
    assert (await client.cancel(pb.CancelRequest(pod_uid=u))).found


async def test_jobs_slurm_refuses_fail_with_its_message(submitter: Submitter, client: pb.SubmitterServiceStub) -> None:
    u = str(uuid.uuid4())
    job = pod_job(u, {"main": "true"})
    job.backend_flags = ["--partition=nosuch"]  # this cluster has one partition, "debug"
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=job))
    assert err.value.status == Status.FAILED_PRECONDITION
    assert "partition" in (err.value.message or "").lower()
    st = await status_of(client, u)
    assert st.state == pb.JobState.FAILED
    assert st.reason == "SubmitFailed"
    assert st.containers[0].phase == Phase.TERMINATED

    sneaky = pod_job(str(uuid.uuid4()), {"main": "true"})
    sneaky.backend_flags = ["--output=/etc/passwd"]
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=sneaky))
    assert "--output" in (err.value.message or "")


async def test_capacity_comes_from_sinfo_and_a_lost_submission_is_found_by_name(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    backend = SlurmBackend()
    cap = await backend.capacity()
    assert cap.cpu_millis == slurm.cpus * 1000
    assert cap.memory_bytes == slurm.mem_mb * 2**20
    assert cap.nodes == 1

    # A crash after sbatch but before its id was recorded: the job is found by its name.
    u = str(uuid.uuid4())
    out = slurm.run("sbatch", "--parsable", f"--job-name={u}", f"--chdir={tmp_path}", "--wrap", "sleep 30")
    job_id = out.stdout.strip()
    never = str(uuid.uuid4())
    found = await backend.reconcile([JobHandle(u, tmp_path), JobHandle(never, tmp_path / "nothing")])
    assert found[u].job_id == job_id
    assert found[never].job_id is None
    calls = backend.calls
    polled = await backend.poll([JobHandle(u, tmp_path, job_id), JobHandle(never, tmp_path, "999999")])
    assert backend.calls == calls + 1, "one squeue for every job"
    assert polled[u].state.name in ("QUEUED", "RUNNING")
    assert never not in polled
    await backend.cancel(JobHandle(u, tmp_path, job_id))


@pytest.mark.timeout(240)
async def test_a_job_over_its_time_limit_ends_as_deadline_exceeded(
    submitter: Submitter, client: pb.SubmitterServiceStub, slurm: SlurmCluster
) -> None:
    u = str(uuid.uuid4())
    job = pod_job(u, {"main": "sleep 600"})
    job.backend_flags = ["--time=1"]  # Slurm's smallest limit: one minute (it kills 60-90 s after start)
    await client.submit(pb.SubmitRequest(job=job))
    st = await until_terminal(client, u, within=200)
    assert st.state == pb.JobState.FAILED
    assert st.reason == "DeadlineExceeded"
    main = st.containers[0]
    assert main.phase == Phase.TERMINATED
    assert main.exit_code not in (None, 0)
    assert main.reason == "DeadlineExceeded"
    assert "time limit" in st.message


async def test_a_flavor_of_the_site_file_reaches_sbatch_and_the_pods_own_flags_win(
    slurm: SlurmCluster, client: pb.SubmitterServiceStub, tmp_path: Path, nats_url: str, pool: str
) -> None:
    """The pool announces its flavor table (Describe); the renderer picks the named flavor; sbatch gets its flags
    first and its memory where the pod asks for none; the pod's own --comment (later) wins over the flavor's. The
    flavor's --nice is the site's word (a pod could not set it: it is not in the default allowlist)."""
    flavors = {"tagged": {"memory_default": "64M", "backend_flags": ["--comment=from-flavor", "--nice=5"]}}
    build_config = {"runtime": "none", "flavors": flavors}
    settings = settings_for(tmp_path / "state", nats_url, pool=pool, backend="slurm", build_config=build_config)
    async with Submitter(settings):
        bc = (await client.describe(pb.DescribeRequest())).build_config
        assert bc.flavors["tagged"].backend_flags == ["--comment=from-flavor", "--nice=5"]
        options = bc.backends.slurm if bc.backends else None
        assert options is not None and set(options.allowed_pod_flags) == DEFAULT_ALLOWED, "the pool announces it"
        assert bc.slurm == options, "and copies it into the old field, for a gateway of the release before"
        u = str(uuid.uuid4())
        pod = pod_dict(u, {"main": "true"}, annotations={"slurm-job.vk.io/flavor": "tagged"})
        pod["metadata"]["annotations"]["slurm-job.vk.io/flags"] = "--comm from-pod"
        resp = await client.submit(pb.SubmitRequest(job=render_job(pod, bc)))
        shown = slurm.run("scontrol", "show", "job", resp.job_id).stdout
        assert "Comment=from-pod" in shown and "Nice=5" in shown and "MinMemoryNode=64M" in shown, shown
        assert (await until_terminal(client, u)).state == pb.JobState.SUCCEEDED
