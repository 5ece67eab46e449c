"""The pods of one Job as ONE job array on a real Slurm, driving the backend (``RunsArrays``) directly: 20 members
are one ``sbatch`` (counted from slurmctld's own log and from each task's ``ArrayJobId``), task i runs member i
with its own output, statuses while 2 tasks run and 18 wait on a 2-CPU node, a delete cancels one task, one member
failing fails only its own, and a new backend instance (as after kill -9) finds the array by its uid; then through a
submitter over RPC, killed right after its sbatch: the restarted one finds the array, submits nothing again; and
killed before its sbatch, restarted while Slurm is unreachable: a pod deleted while the next recovery's sbatch is
in flight has its (still pending) task cancelled by Slurm, never run.

Members are real rendered pod scripts (runtime ``none``) in job directories made as the submitter makes them.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.subjects import rpc_subject
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import (
    ArraySpec,
    BackendState,
    BackendUnavailable,
    JobHandle,
    JobSpec,
    Observation,
    Reconciled,
)
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import SimulatedCrash, crash, settings_for, wait_for
from jobs import pod_dict, pod_job
from slurm_cluster import SlurmCluster, slurm_for_tests

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]

RECORD = 'printf "%s %s\\n" "$SLURM_ARRAY_TASK_ID" "$SLURM_ARRAY_JOB_ID" > "$INTERLINK_JOB_DIR/task"\n'


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests(cpus=2) as cluster:  # a node with few CPUs: most tasks of an array wait
        yield cluster


def make_array(state: Path, commands: Sequence[str]) -> ArraySpec:
    """Member i runs ``commands[i]`` in its one container (one CPU each), in its own job directory."""
    members = []
    for i, command in enumerate(commands):
        uid = str(uuid.uuid4())
        pod = pod_dict(uid, {"main": command}, name=f"scan-{i}", limits={"cpu": "1", "memory": "32Mi"})
        pod["spec"]["terminationGracePeriodSeconds"] = 2
        job = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        shebang, rest = job.script.split("\n", 1)
        job_dir = job_dir_for(state, uid)
        script = prepare_job_dir(job_dir, f"{shebang}\n{RECORD}{rest}", job.layout)
        members.append(JobSpec(uid, job_dir, script, job.resources, tuple(job.backend_flags), "default", f"scan-{i}"))
    array_uid = str(uuid.uuid4())
    return ArraySpec(array_uid, tuple(members), state / "arrays" / array_uid, name="scan", namespace="default")


def submissions(slurm: SlurmCluster) -> int:
    """Batch submissions slurmctld itself logged (one per sbatch, however many tasks)."""
    return len(re.findall(r"_slurm_rpc_submit_batch_job", (slurm.dir / "log" / "slurmctld.log").read_text()))


def handles(array: ArraySpec, ids: Sequence[str]) -> list[JobHandle]:
    return [JobHandle(m.uid, m.job_dir, job_id) for m, job_id in zip(array.members, ids, strict=True)]


async def test_twenty_pods_are_one_sbatch_and_each_task_is_its_own_pod(slurm: SlurmCluster, tmp_path: Path) -> None:
    release = tmp_path / "release"
    wait = f"until [ -e {shlex.quote(str(release))} ]; do sleep 0.1; done"
    commands = [f"{wait}; echo own-output-{i}" + ("; exit 3" if i == 7 else "") for i in range(20)]
    array = make_array(tmp_path / "state", commands)
    backend = SlurmBackend(SlurmConfig(array_throttle=0))
    before = submissions(slurm)
    array_id, ids = await backend.submit_array(array)
    assert ids == tuple(f"{array_id}_{i}" for i in range(20))
    assert backend.calls == 1
    jobs = handles(array, ids)

    async def two_running() -> dict[str, Observation] | None:
        seen = await backend.poll(jobs)
        return seen if sum(o.state is BackendState.RUNNING for o in seen.values()) == 2 else None

    seen = await wait_for(two_running, timeout=120, interval=0.3, what="two tasks running")
    assert submissions(slurm) - before == 1, "one batch submission in slurmctld's log for 20 pods"
    shown = slurm.run("scontrol", "show", "job", array_id).stdout
    assert set(re.findall(r"ArrayJobId=(\d+)", shown)) == {array_id}
    assert re.search(r"ArrayTaskId=\d+-19\b", shown), "the pending tasks share one record"
    assert len(seen) == 20, "every member answered by one squeue, pending ones from the folded range"
    states = sorted(o.state.value for o in seen.values())
    assert states == ["queued"] * 18 + ["running"] * 2, states

    first_running = next(j for j in jobs if seen[j.uid].state is BackendState.RUNNING)
    await backend.cancel(first_running)  # a delete: scancel <id>_<i>, that task only
    await backend.cancel(jobs[19])  # still pending: Slurm drops it from the range
    release.touch()

    async def all_ended() -> dict[str, Observation] | None:
        now = await backend.poll(jobs)
        done = [j for j in jobs if j.uid not in now or now[j.uid].state.terminal]
        return now if len(done) == 20 else None

    ended = await wait_for(all_ended, timeout=300, interval=0.5, what="every task to end")
    cancelled = {first_running.uid, jobs[19].uid}
    assert ended.get(first_running.uid, Observation(BackendState.GONE)).state is BackendState.CANCELLED
    assert jobs[19].uid not in ended or ended[jobs[19].uid].state is BackendState.CANCELLED
    for i, (member, job) in enumerate(zip(array.members, jobs, strict=True)):
        if job.uid in cancelled:
            continue
        obs = ended[job.uid]
        if i == 7:
            assert (obs.state, obs.exit_code) == (BackendState.FAILED, 3), obs
        else:
            assert (obs.state, obs.exit_code) == (BackendState.COMPLETED, 0), (i, obs)
        assert (member.job_dir / "task").read_text() == f"{i} {array_id}\n"
        assert (member.job_dir / "job.out").exists(), "Slurm wrote the task's output in its member's directory"
        assert layout.log_path(member.job_dir, "main").read_text() == f"own-output-{i}\n", "each member's log its own"
    assert submissions(slurm) - before == 1


async def test_a_new_backend_finds_the_array_by_its_uid_and_never_submits_it_again(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    array = make_array(tmp_path / "state", [f"until [ -e {shlex.quote(str(release))} ]; do sleep 0.1; done"] * 5)
    assert (await SlurmBackend().find_array(array)).job_id is None, "not submitted yet"
    before = submissions(slurm)
    array_id, _ = await SlurmBackend().submit_array(array)
    again = SlurmBackend()  # the submitter killed with -9 and started again: nothing in memory
    assert (await again.find_array(array)).job_id == array_id
    release.touch()

    async def ended() -> bool | None:
        seen = await again.poll(handles(array, [f"{array_id}_{i}" for i in range(5)]))
        return (len(seen) == 5 and all(o.state is BackendState.COMPLETED for o in seen.values())) or None

    await wait_for(ended, timeout=200, interval=0.5, what="the array to complete")
    assert (await SlurmBackend().find_array(array)).job_id == array_id, "still found once its tasks ended"
    assert submissions(slurm) - before == 1


def array_jobs(commands: Sequence[str]) -> list[pb.JobScript]:
    """One array of rendered pod jobs (runtime none) of one Indexed Job: member i runs ``commands[i]``."""
    array_uid, job_uid = f"a-{uuid.uuid4()}", str(uuid.uuid4())
    jobs = []
    for i, command in enumerate(commands):
        job = pod_job(str(uuid.uuid4()), {"main": command}, name=f"scan-{i}", limits={"cpu": "1", "memory": "32Mi"})
        job.array = pb.ArrayMember(
            array_uid=array_uid, job_name="scan", job_uid=job_uid, task=i, size=len(commands), completion_index=i
        )
        jobs.append(job)
    return jobs


async def test_through_the_submitter_a_killed_submitter_finds_its_array_again_and_submits_nothing_twice(
    slurm: SlurmCluster, tmp_path: Path, nats_url: str
) -> None:
    pool = f"slurm{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    members = array_jobs([f"until [ -e {shlex.quote(str(release))} ]; do sleep 0.1; done; echo done-$((1+1))"] * 6)
    uids = [m.pod.uid for m in members if m.pod is not None]
    array_uid = members[0].array.array_uid if members[0].array is not None else ""
    settings = settings_for(tmp_path / "state", nats_url, pool=pool, backend="slurm", poll_interval=0.5)
    nc = await nats.connect(nats_url)
    await ensure_events_stream(nc.jetstream(timeout=5))
    before = submissions(slurm)
    dead = Submitter(settings, backend=SlurmBackend())
    await dead.start()

    def die(step: str) -> None:
        if step == "submitted":
            raise SimulatedCrash(step)

    dead.submissions.on_step = die
    request = pb.SubmitGroupRequest(members=members, kind=pb.GroupKind.ARRAY)
    with pytest.raises(SimulatedCrash):
        await dead.gangs.submit_group(request)
    await crash(dead)
    await dead.stop()
    assert submissions(slurm) - before == 1
    [array_id] = {i.split("_")[0] for i in slurm.run("squeue", "-h", f"--name={array_uid}", "-o", "%i").stdout.split()}
    try:
        async with Submitter(settings, backend=SlurmBackend()):
            client = submitter_client(nc, pool, timeout=60)
            again = await client.submit_group(request)  # the gateway's retry: answered from what Slurm has
            assert list(again.member_job_ids) == [f"{array_id}_{i}" for i in range(6)], again

            async def two_running() -> list[pb.JobStatus] | None:
                states = list((await client.get_status(pb.GetStatusRequest(pod_uids=uids))).statuses)
                running = sum(s.state == pb.JobState.RUNNING for s in states)
                return states if running == 2 else None

            states = await wait_for(two_running, timeout=120, interval=0.3, what="two tasks running on 2 CPUs")
            assert sorted(s.state for s in states).count(pb.JobState.PENDING) == 4, states
            await client.cancel(pb.CancelRequest(pod_uid=uids[5]))  # a delete: that task only
            release.touch()

            async def all_ended() -> list[pb.JobStatus] | None:
                now = list((await client.get_status(pb.GetStatusRequest(pod_uids=uids))).statuses)
                done = [s for s in now if s.state in (pb.JobState.SUCCEEDED, pb.JobState.CANCELLED)]
                return now if len(done) == 6 else None

            ended = {
                s.pod.uid: s.state for s in await wait_for(all_ended, timeout=200, what="every member to end") if s.pod
            }
            assert ended[uids[5]] == pb.JobState.CANCELLED
            assert [ended[u] for u in uids[:5]] == [pb.JobState.SUCCEEDED] * 5
    finally:
        await nc.close()
    assert submissions(slurm) - before == 1, "never submitted twice"


class HeldSlurm(SlurmBackend):
    """The real Slurm backend, unreachable for array lookups while ``down`` (as at a submitter's restart while
    slurmctld is), its array's sbatch held in flight (``entered`` set) until ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def find_array(self, array: ArraySpec) -> Reconciled:
        if self.down:
            raise BackendUnavailable("slurmctld unreachable")
        return await super().find_array(array)

    async def submit_array(self, array: ArraySpec) -> tuple[str, tuple[str, ...]]:
        self.entered.set()
        await self.release.wait()
        return await super().submit_array(array)


async def test_a_pod_deleted_while_recovery_submits_its_array_has_its_task_cancelled_by_slurm_never_run(
    slurm: SlurmCluster, tmp_path: Path, nats_url: str
) -> None:
    pool = f"slurm{uuid.uuid4().hex[:8]}"
    runs, release = tmp_path / "runs", tmp_path / "release"
    runs.mkdir()
    hold = f"until [ -e {shlex.quote(str(release))} ]; do sleep 0.1; done; "
    # tasks 0 and 1 fill the 2-CPU node until released: task 2, the deleted one, is still pending when cancelled
    members = array_jobs([f"{hold if i < 2 else ''}echo run >> {shlex.quote(str(runs / str(i)))}" for i in range(3)])
    uids = [m.pod.uid for m in members if m.pod is not None]
    array_uid = members[0].array.array_uid if members[0].array is not None else ""
    settings = settings_for(tmp_path / "state", nats_url, pool=pool, backend="slurm", poll_interval=0.5)
    nc = await nats.connect(nats_url)
    await ensure_events_stream(nc.jetstream(timeout=5))
    before = submissions(slurm)
    dead = Submitter(settings, backend=SlurmBackend())
    await dead.start()

    def die(step: str) -> None:
        if step == "job_dir":  # claimed, the member list written, no sbatch yet
            raise SimulatedCrash(step)

    dead.submissions.on_step = die
    request = pb.SubmitGroupRequest(members=members, kind=pb.GroupKind.ARRAY)
    with pytest.raises(SimulatedCrash):
        await dead.gangs.submit_group(request)
    await crash(dead)
    await dead.stop()
    assert submissions(slurm) == before
    backend = HeldSlurm()
    try:
        async with Submitter(settings, backend=backend) as restarted:
            assert not backend.entered.is_set(), "its start's recovery could not reach Slurm"
            client = submitter_client(nc, pool, timeout=60)
            backend.down = False
            recovery = asyncio.create_task(restarted.recover())  # what the poll loop runs now and then
            await asyncio.wait_for(backend.entered.wait(), timeout=30)
            heard = await nc.subscribe(rpc_subject("Cancel", pool))
            cancel = asyncio.create_task(client.cancel(pb.CancelRequest(pod_uid=uids[2])))  # the pod deleted now
            await heard.next_msg(timeout=30)
            backend.release.set()  # the sbatch goes on, the Cancel already received
            await recovery
            reply = await cancel
            assert reply.found and reply.status.state == pb.JobState.CANCELLED
            [array_id] = {
                i.split("_")[0] for i in slurm.run("squeue", "-h", f"--name={array_uid}", "-o", "%i").stdout.split()
            }
            listed = slurm.run("squeue", "-h", "-t", "all", "-j", array_id, "-o", "%i %T").stdout.split("\n")
            tasks = dict(line.split() for line in listed if line.strip())
            # scancel of a pending task: Slurm drops it from the pending range (or shows it cancelled a while)
            assert tasks.get(f"{array_id}_2", "CANCELLED") == "CANCELLED", tasks
            assert not any(t.endswith("_[2]") or "-2]" in t for t in tasks), tasks
            release.touch()

            async def others_ended() -> list[pb.JobStatus] | None:
                now = list((await client.get_status(pb.GetStatusRequest(pod_uids=uids[:2]))).statuses)
                return now if all(s.state == pb.JobState.SUCCEEDED for s in now) and len(now) == 2 else None

            await wait_for(others_ended, timeout=200, what="the other members to succeed")
            assert uids[2] not in restarted.poller.tracked, "a deleted pod is not polled"
    finally:
        await nc.close()
    assert sorted(p.name for p in runs.iterdir()) == ["0", "1"], "the deleted member's command never ran"
    assert {p.read_text() for p in runs.iterdir()} == {"run\n"}, "the others ran once"
    assert submissions(slurm) - before == 1, "one sbatch"
