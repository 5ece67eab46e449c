"""Pod groups (gangs) through a real two-node Slurm: driving the backend directly (one allocation, one
``srun`` step per member, the failure policy, one scancel, finding a gang by name after a crash), and through a
submitter over RPC (killed right after its sbatch: found again, not resubmitted; a delete cancels it once).

Two slurmds on this host (``SlurmCluster(nodes=2)``), 2 CPUs each: a gang of 4 one-CPU members fills both, so
ranks 0-1 land on node1 and 2-3 on node2. Members are real rendered pod scripts (runtime ``none``), prepared as
the submitter prepares a job directory; one line added after the shebang records what the launcher gave them.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend
from interlink_nats.submitters.core.backend import BackendState, GangSpec, JobHandle, JobSpec, Observation
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir, read_member_exit
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import SimulatedCrash, crash, settings_for, wait_for
from jobs import pod_dict, pod_job
from slurm_cluster import SlurmCluster, slurm_for_tests

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

Policy = pb.GangFailurePolicy
RECORD = (
    'env | grep -a "^INTERLINK_" > "$INTERLINK_JOB_DIR/group.env"; '
    'printf "%s %s %s\\n" "$SLURM_JOB_ID" "$SLURM_STEP_ID" "$SLURMD_NODENAME" > "$INTERLINK_JOB_DIR/step"\n'
)


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests(nodes=2, cpus=2) as cluster:
        yield cluster


def make_gang(
    state: Path, commands: Sequence[str], *, name: str = "trainer", policy: pb.GangFailurePolicy = Policy.FAIL_GANG
) -> GangSpec:
    """A gang whose member ``i`` runs ``commands[i]`` in its one container, each in a job directory made as the
    submitter makes it (``prepare_job_dir``) from the real renderer's script."""
    members = []
    for i, command in enumerate(commands):
        uid = str(uuid.uuid4())
        # The pods' names are DNS subdomains (the gateway refuses others); the gang's name may be any string here,
        # as a backend is called with what any NATS client sent (the submitter's request check is apart).
        pod = pod_dict(uid, {"main": command}, name=f"member-{i}", limits={"cpu": "1", "memory": "64Mi"})
        pod["spec"]["terminationGracePeriodSeconds"] = 3
        job = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        shebang, rest = job.script.split("\n", 1)
        job_dir = job_dir_for(state, uid)
        script = prepare_job_dir(job_dir, f"{shebang}\n{RECORD}{rest}", job.layout)
        members.append(
            JobSpec(
                uid, job_dir, script, job.resources, tuple(job.backend_flags), namespace="default", name=f"member-{i}"
            )
        )
    gid = str(uuid.uuid4())
    return GangSpec(gid, name, state / layout.GANG_DIR / gid, tuple(members), policy, "default")


def handle(gang: GangSpec, job_id: str) -> JobHandle:
    return JobHandle(gang.uid, gang.job_dir, job_id)


async def until_ended(backend: SlurmBackend, gang: GangSpec, job_id: str) -> Observation:
    async def ended() -> Observation | None:
        seen = (await backend.poll([handle(gang, job_id)])).get(gang.uid)
        return seen if seen is not None and seen.state.terminal else None

    return await wait_for(ended, timeout=120, interval=0.25, what=f"gang job {job_id} to end")


def exit_code(spec: JobSpec) -> str:
    """The member's container's exit file (its code, without a reason), once written."""
    text = layout.exit_path(spec.job_dir, "main").read_text()
    assert text.endswith("\n"), text
    return text.split()[0]


def all_up(marks: Path, count: int) -> str:
    """Shell: wait until ``count`` members have touched their marker in ``marks``."""
    return f'until [ "$(ls {shlex.quote(str(marks))} | wc -l)" -ge {count} ]; do sleep 0.1; done'


def slurm_ids(slurm: SlurmCluster) -> set[str]:
    return set(slurm.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split())


async def test_a_gang_of_four_runs_at_once_in_one_allocation_with_its_group_environment(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    commands = [f"touch {shlex.quote(str(marks / str(i)))}; {all_up(marks, 4)}" for i in range(4)]
    gang = make_gang(tmp_path / "state", commands, name="it's a $group")
    backend = SlurmBackend()
    before = slurm_ids(slurm)
    job_id = await backend.submit_gang(gang)
    assert backend.calls == 1, "one sbatch for the whole group"
    assert slurm_ids(slurm) - before == {job_id}
    shown = slurm.run("squeue", "-h", "-j", job_id, "-o", "%j|%D|%C").stdout.strip()
    assert shown.startswith(f"{gang.uid}|"), shown

    seen = await until_ended(backend, gang, job_id)  # the members only end once all four have started
    assert (seen.state, seen.exit_code) == (BackendState.COMPLETED, 0), seen
    hosts = ["node1", "node1", "node2", "node2"]
    for rank, member in enumerate(gang.members):
        env = dict(line.split("=", 1) for line in (member.job_dir / "group.env").read_text().splitlines())
        assert env[layout.GROUP_RANK_ENV] == str(rank)
        assert env[layout.GROUP_SIZE_ENV] == "4"
        assert env[layout.GROUP_HOSTS_ENV] == ",".join(hosts)
        assert env[layout.GROUP_LEADER_ENV] == "node1"
        assert env[layout.GROUP_NAME_ENV] == "it's a $group"
        assert env[layout.JOB_DIR_ENV] == str(member.job_dir)
        job, _step, node = (member.job_dir / "step").read_text().split()
        assert (job, node) == (job_id, hosts[rank]), "its own step, inside the gang's allocation, on its host"
        assert exit_code(member) == "0"
        assert (member.job_dir / layout.JOB_STDOUT).exists()
    assert len({(m.job_dir / "step").read_text().split()[1] for m in gang.members}) == 4
    assert (gang.job_dir / layout.JOB_STDOUT).exists()
    assert slurm_ids(slurm) - before == {job_id}, "no other job"


@pytest.mark.parametrize("policy", [Policy.FAIL_GANG, Policy.CONTINUE])
async def test_a_failing_member_fails_the_gang_and_the_policy_decides_the_others(
    slurm: SlurmCluster, tmp_path: Path, policy: pb.GangFailurePolicy
) -> None:
    """Member 1 exits 3 once the others run. FAIL_GANG: they would run for 300 s, so only the launcher's TERM
    ends them (143, written by their own scripts). CONTINUE: they end 0 once member 1 has failed."""
    marks = tmp_path / "marks"
    marks.mkdir()
    failed = tmp_path / "failed"
    then = "sleep 300" if policy == Policy.FAIL_GANG else f"until [ -e {shlex.quote(str(failed))} ]; do sleep 0.1; done"
    others = [f"touch {shlex.quote(str(marks / str(i)))}; {then}" for i in (0, 2)]
    failing = f"{all_up(marks, 2)}; touch {shlex.quote(str(failed))}; exit 3"
    gang = make_gang(tmp_path / "state", [others[0], failing, others[1]], policy=policy)
    backend = SlurmBackend()
    job_id = await backend.submit_gang(gang)
    seen = await until_ended(backend, gang, job_id)
    assert (seen.state, seen.exit_code) == (BackendState.FAILED, 3), seen
    codes = [exit_code(m) for m in gang.members]
    recorded = [read_member_exit(m.job_dir) for m in gang.members]  # what the launcher says of each, for the poll
    if policy == Policy.CONTINUE:
        assert codes == ["0", "3", "0"]
        assert recorded == [(0, False), (3, False), (0, False)]
        return
    assert recorded == [(143, True), (3, False), (143, True)], "the others marked as stopped for member 1"
    assert codes[1] == "3"
    # The launcher's TERM reached both others' steps (slurmstepd says so in their output), and each step's
    # processes got it at once (as a batch step's do on scancel): their scripts record the TERM's 143.
    for rank in (0, 2):
        assert codes[rank] == "143", codes
        step_out = (gang.members[rank].job_dir / layout.JOB_STDOUT).read_text()
        assert f"STEP {job_id}." in step_out and "CANCELLED" in step_out, step_out  # slurmstepd: signalled
    assert "stopping the other 2 (TERM to their steps)" in (gang.job_dir / layout.JOB_STDOUT).read_text()


def running_members(token: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", token], capture_output=True, text=True).stdout.split()


async def test_cancel_is_one_scancel_that_ends_every_step_and_find_gang_finds_it_by_name(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    token = f"gang-{uuid.uuid4().hex}"
    commands = [f": {token}; touch {shlex.quote(str(marks / str(i)))}; sleep 300" for i in range(4)]
    gang = make_gang(tmp_path / "state", commands)
    backend = SlurmBackend()
    job_id = await backend.submit_gang(gang)

    lost = SlurmBackend()  # a restarted submitter that never recorded the id: the gang's name finds it
    assert (await lost.find_gang(gang)).job_id == job_id
    never = make_gang(tmp_path / "other", ["true"])
    assert (await lost.find_gang(never)).job_id is None

    async def four_up() -> bool:
        return len(list(marks.iterdir())) == 4 and len(running_members(token)) >= 4

    await wait_for(four_up, timeout=60, what="all four members to run")
    calls = backend.calls
    await backend.cancel(handle(gang, job_id))
    assert backend.calls == calls + 1, "one scancel for the whole group"
    seen = await until_ended(backend, gang, job_id)
    assert seen.state == BackendState.CANCELLED, seen

    async def no_member_left() -> bool:
        steps = slurm.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i").stdout.strip()
        return not steps and not running_members(token)

    await wait_for(no_member_left, timeout=60, what="every step and member process to end")


class CountingSlurm(SlurmBackend):
    """The real Slurm backend, counting what the submitter asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.gang_submits: list[str] = []
        self.single_submits: list[str] = []
        self.cancels: list[str] = []

    async def submit(self, spec: JobSpec) -> str:
        self.single_submits.append(spec.uid)
        return await super().submit(spec)

    async def submit_gang(self, gang: GangSpec) -> str:
        self.gang_submits.append(gang.uid)
        return await super().submit_gang(gang)

    async def cancel(self, job: JobHandle) -> None:
        self.cancels.append(job.uid)
        await super().cancel(job)


async def test_through_the_submitter_a_killed_submitter_finds_its_gang_again_and_a_delete_cancels_it_once(
    slurm: SlurmCluster, tmp_path: Path, nats_url: str
) -> None:
    """SubmitGroup over RPC to a Slurm pool; the submitter dies (as kill -9 leaves it) right after its sbatch,
    before it recorded the id. The restarted one finds the allocation by the gang's name and resubmits nothing;
    the gateway's retry is answered from it. All four run in it; deleting one member cancels the allocation once,
    deleting another calls Slurm no more, and every member ends."""
    pool = f"slurm{uuid.uuid4().hex[:8]}"
    marks = tmp_path / "marks"
    marks.mkdir()
    members = gang_jobs([f"touch {shlex.quote(str(marks))}/$INTERLINK_GROUP_RANK; sleep 300"] * 4)
    uids = [m.pod.uid for m in members if m.pod is not None]
    group = members[0].gang.group_uid if members[0].gang is not None else ""
    settings = settings_for(tmp_path / "state", nats_url, pool=pool, backend="slurm", poll_interval=0.5)
    nc = await nats.connect(nats_url)
    await ensure_events_stream(nc.jetstream(timeout=5))
    first = CountingSlurm()
    dead = Submitter(settings, backend=first)
    await dead.start()

    def die(step: str) -> None:
        if step == "submitted":
            raise SimulatedCrash(step)

    dead.submissions.on_step = die
    with pytest.raises(SimulatedCrash):
        await dead.gangs.submit_group(pb.SubmitGroupRequest(members=members))
    await crash(dead)
    await dead.stop()
    assert first.gang_submits == [group]
    [job_id] = slurm.run("squeue", "-h", f"--name={group}", "-o", "%i").stdout.split()
    second = CountingSlurm()
    try:
        async with Submitter(settings, backend=second):
            client = submitter_client(nc, pool, timeout=30)
            again = await client.submit_group(pb.SubmitGroupRequest(members=members))  # the gateway's retry
            assert not again.created and again.job_id == job_id
            assert second.gang_submits == [] and second.single_submits == []
            assert slurm.run("squeue", "-h", f"--name={group}", "-o", "%i").stdout.split() == [job_id]

            async def all_running() -> bool:
                states = (await client.get_status(pb.GetStatusRequest(pod_uids=uids))).statuses
                return len(list(marks.iterdir())) == 4 and all(s.state == pb.JobState.RUNNING for s in states)

            await wait_for(all_running, timeout=60, what="all four members running in the one allocation")
            await client.cancel(pb.CancelRequest(pod_uid=uids[0]))
            await client.cancel(pb.CancelRequest(pod_uid=uids[1]))
            assert second.cancels == [group], "one scancel for the gang, not one per member"

            async def all_ended() -> bool:
                states = (await client.get_status(pb.GetStatusRequest(pod_uids=uids))).statuses
                return all(s.state in (pb.JobState.CANCELLED, pb.JobState.FAILED) for s in states)

            await wait_for(all_ended, timeout=60, what="every member to end with its allocation")
            assert not slurm.run("squeue", "-h", f"--name={group}", "-o", "%i").stdout.split()
    finally:
        await nc.close()


def gang_jobs(commands: Sequence[str]) -> list[pb.JobScript]:
    """One gang of rendered pod jobs (runtime none): member ``rank`` runs ``commands[rank]``."""
    group = f"g-{uuid.uuid4()}"
    jobs = []
    for rank, command in enumerate(commands):
        job = pod_job(str(uuid.uuid4()), {"main": command}, name=f"trainer-{rank}")
        job.gang = pb.GangMember(group_uid=group, group_name="trainer", rank=rank, size=len(commands))
        jobs.append(job)
    return jobs
