"""Pod groups end to end on the shell backend: real nats-server, real RPC layer, real bash.

A gang is one backend job (the launcher) whose members are ordinary pods to GetStatus, Cancel and events.
What is counted: the backend's submissions (``CountingShell``) and what each member's container really did.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import htcondor_standin as standin
import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.core.backend import BackendState, GangSpec, JobHandle, JobSpec, Observation
from interlink_nats.submitters.jobdirs.files import prepare_job_dir
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings
from interlink_nats.submitters.testing import SimulatedCrash, crash, settings_for, wait_for
from jobs import pod_job
from podman_host import IMAGE, PodmanHost
from shell_submitter import Phase, final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool

FAIL_GANG = pb.GangFailurePolicy.FAIL_GANG
CONTINUE = pb.GangFailurePolicy.CONTINUE


class CountingShell(ShellBackend):
    """The real shell backend, counting what the submitter asked of it."""

    def __init__(self) -> None:
        super().__init__(kill_grace_s=3.0)
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


def gang(
    commands: Sequence[str], *, policy: pb.GangFailurePolicy = FAIL_GANG, name: str = "trainer"
) -> list[pb.JobScript]:
    """One gang: member ``rank`` runs ``commands[rank]`` (``sh -c``) in its container ``main``."""
    group = f"g-{uuid.uuid4()}"
    out = []
    for rank, cmd in enumerate(commands):
        job = pod_job(uid(), {"main": cmd}, name=f"{name}-{rank}")
        job.gang = pb.GangMember(group_uid=group, group_name=name, rank=rank, size=len(commands), failure_policy=policy)
        out.append(job)
    return out


def uids(members: Sequence[pb.JobScript]) -> list[str]:
    return [m.pod.uid for m in members if m.pod is not None]


@pytest.fixture
def backend() -> CountingShell:
    return CountingShell()


@pytest.fixture
async def submitter(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS, backend: CountingShell
) -> AsyncIterator[Submitter]:
    await ensure_events_stream(nc.jetstream())
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=pool), backend=backend) as s:
        yield s


async def statuses(client: pb.SubmitterServiceStub, members: Sequence[str], within: float = 40) -> list[pb.JobStatus]:
    return [await final_status(client, u, within) for u in members]


def member_log(sub: Submitter, pod_uid: str) -> str:
    return (sub.state_dir / "jobs" / pod_uid / "containers" / "main.log").read_text()


async def submit_until_crash(
    settings: SubmitterSettings, members: list[pb.JobScript], step: str
) -> tuple[Submitter, CountingShell]:
    """A submitter (and its backend) whose SubmitGroup of ``members`` dies at ``step`` (the ``on_step`` seam)."""
    backend = CountingShell()
    submitter = Submitter(settings, backend=backend)
    await submitter.start()

    def die(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    submitter.submissions.on_step = die
    with pytest.raises(SimulatedCrash):
        await submitter.gangs.submit_group(pb.SubmitGroupRequest(members=members))
    return submitter, backend


async def test_a_gang_of_four_is_one_job_whose_members_run_at_once_with_their_group_env(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell, tmp_path: Path
) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    # Each member writes its file, then waits (30 s at most) until all four have: only concurrent members pass.
    cmd = (
        'echo "name=$INTERLINK_GROUP_NAME size=$INTERLINK_GROUP_SIZE rank=$INTERLINK_GROUP_RANK '
        'hosts=$INTERLINK_GROUP_HOSTS leader=$INTERLINK_GROUP_LEADER"; '
        f"touch {barrier}/$INTERLINK_GROUP_RANK; "
        f"i=0; while [ $(ls {barrier} | wc -l) -lt 4 ]; do i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.1; done"
    )
    members = gang([cmd] * 4)
    client = submitter_client(nc, pool, timeout=30)
    resp = await client.submit_group(pb.SubmitGroupRequest(members=members))
    assert resp.created and resp.job_id
    final = await statuses(client, uids(members))
    assert [s.state for s in final] == [pb.JobState.SUCCEEDED] * 4, [s.message for s in final]
    assert {s.job_id for s in final} == {resp.job_id}, "every member's job id is the gang's"
    assert len(backend.gang_submits) == 1 and backend.single_submits == [], "one backend job, no member alone"
    host = socket.gethostname()
    for rank, u in enumerate(uids(members)):
        assert member_log(submitter, u).strip() == (
            f"name=trainer size=4 rank={rank} hosts={','.join([host] * 4)} leader={host}"
        )


async def test_fail_gang_stops_the_others_by_sigterm_and_says_why(
    submitter: Submitter, nc: nats.NATS, pool: str, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    started.mkdir()
    wait_all = f"touch {started}/$INTERLINK_GROUP_RANK; while [ $(ls {started} | wc -l) -lt 3 ]; do sleep 0.05; done"
    members = gang([f"{wait_all}; sleep 120", f"{wait_all}; exit 3", f"{wait_all}; sleep 120"])
    client = submitter_client(nc, pool, timeout=30)
    await client.submit_group(pb.SubmitGroupRequest(members=members))
    first, failed, third = await statuses(client, uids(members))
    assert failed.state == pb.JobState.FAILED
    assert [(c.phase, c.exit_code) for c in failed.containers] == [(Phase.TERMINATED, 3)]
    for st in (first, third):
        assert st.state == pb.JobState.FAILED
        assert st.reason == "PodGroupFailed", st
        assert "another member of pod group" in st.message and "FailGang" in st.message
        assert [(c.phase, c.exit_code) for c in st.containers] == [(Phase.TERMINATED, 143)]


async def test_continue_lets_the_others_finish_normally(submitter: Submitter, nc: nats.NATS, pool: str) -> None:
    members = gang(["sleep 1; echo ok", "exit 3", "sleep 1; echo ok"], policy=CONTINUE)
    client = submitter_client(nc, pool, timeout=30)
    await client.submit_group(pb.SubmitGroupRequest(members=members))
    first, failed, third = await statuses(client, uids(members))
    assert failed.state == pb.JobState.FAILED and failed.message == "container main exited with 3"
    assert (first.state, third.state) == (pb.JobState.SUCCEEDED, pb.JobState.SUCCEEDED)
    assert member_log(submitter, uids(members)[2]) == "ok\n"


def leftovers(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False).stdout
    return found.split()


async def test_a_retry_answers_without_a_second_launch_and_cancel_stops_the_gang_once(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell
) -> None:
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"  # a sleep argument only this test uses
    members = gang([f"sleep {marker}"] * 3)
    client = submitter_client(nc, pool, timeout=30)
    req = pb.SubmitGroupRequest(members=members)
    one, two = await asyncio.gather(client.submit_group(req), client.submit_group(req))
    assert sorted([one.created, two.created]) == [False, True], "concurrent identical requests share one submission"
    assert one.job_id == two.job_id
    again = await client.submit_group(req)
    assert (again.created, again.job_id) == (False, one.job_id)
    assert [s.pod.uid for s in again.statuses if s.pod is not None] == uids(members)
    assert len(backend.gang_submits) == 1

    async def running() -> bool:
        resp = await client.get_status(pb.GetStatusRequest(pod_uids=uids(members)))
        return all(s.state == pb.JobState.RUNNING for s in resp.statuses) and len(leftovers(marker)) >= 3

    await wait_for(running, timeout=20, what="every member running")
    first, second, third = uids(members)
    cancelled, _ = await asyncio.gather(  # two members' pods deleted at once
        client.cancel(pb.CancelRequest(pod_uid=first)), client.cancel(pb.CancelRequest(pod_uid=second))
    )
    assert cancelled.found and cancelled.status.state == pb.JobState.CANCELLED
    assert backend.cancels == [members[0].gang.group_uid], "the gang's job is cancelled once, by its own handle"
    st = await final_status(client, third, 20)
    assert st.state == pb.JobState.CANCELLED, st

    async def nothing_left() -> bool:
        return not leftovers(marker)

    await wait_for(nothing_left, timeout=20, what="no member process left")
    gang_dir = submitter.state_dir / "gangs" / members[0].gang.group_uid
    assert gang_dir.is_dir()
    await client.cancel(pb.CancelRequest(pod_uid=third))  # the pod of the last member is deleted too
    assert not gang_dir.exists(), "the gang's directory goes with its last member"
    assert len(backend.cancels) == 1


async def test_a_crash_between_claim_and_submit_runs_the_gang_exactly_once(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS
) -> None:
    await ensure_events_stream(nc.jetstream())
    runs = tmp_path / "runs"
    runs.mkdir()
    members = gang([f"echo run >> {runs}/$INTERLINK_GROUP_RANK"] * 3)
    settings = settings_for(tmp_path / "state", nats_url, pool=pool)
    # every member claimed with its script stored, the gang not submitted
    a, first = await submit_until_crash(settings, members, "job_dir")
    await crash(a)
    await first.close()
    await a.stop()
    assert first.gang_submits == []
    second = CountingShell()
    async with Submitter(settings, backend=second) as b:  # recovery alone submits it: every member is stored
        client = submitter_client(nc, pool, timeout=30)
        final = await statuses(client, uids(members))
        assert [s.state for s in final] == [pb.JobState.SUCCEEDED] * 3
        again = await client.submit_group(pb.SubmitGroupRequest(members=members))  # the gateway's retry
        assert not again.created and again.job_id == final[0].job_id
        assert second.gang_submits == [members[0].gang.group_uid] and second.single_submits == []
        assert b.tracked == 0
    assert sorted(p.name for p in runs.iterdir()) == ["0", "1", "2"]
    assert {p.read_text() for p in runs.iterdir()} == {"run\n"}, "each member ran exactly once"


async def test_a_crash_mid_claims_waits_for_the_retry_and_never_runs_a_member_alone(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS
) -> None:
    await ensure_events_stream(nc.jetstream())
    members = gang(["echo ran"] * 3)
    settings = settings_for(tmp_path / "state", nats_url, pool=pool)
    # the first member's claim is durable; the others may or may not be
    a, first = await submit_until_crash(settings, members, "claimed")
    await crash(a)
    await first.close()
    await a.stop()
    second = CountingShell()
    async with Submitter(settings, backend=second) as b:
        assert b.tracked == 0 and second.gang_submits == [], "no script stored for some member: wait for the retry"
        client = submitter_client(nc, pool, timeout=30)
        claimed = [u for u in uids(members) if (await b.queries.job_phase(u)) is not None]
        assert claimed, "the first claim was committed before the crash"
        job = copy.copy(members[uids(members).index(claimed[0])])
        job.gang = None
        with pytest.raises(GRPCError) as err:  # a member alone is never resumed by a plain Submit
            await client.submit(pb.SubmitRequest(job=job))
        assert err.value.status == Status.INVALID_ARGUMENT and "SubmitGroup" in (err.value.message or "")
        again = await client.submit_group(pb.SubmitGroupRequest(members=members))  # the gateway's retry
        assert again.job_id
        final = await statuses(client, uids(members))
        assert [s.state for s in final] == [pb.JobState.SUCCEEDED] * 3
        assert second.gang_submits == [members[0].gang.group_uid] and second.single_submits == []


async def test_a_crash_after_the_backend_took_the_gang_finds_it_again(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS
) -> None:
    await ensure_events_stream(nc.jetstream())
    runs = tmp_path / "runs"
    runs.mkdir()
    gate = tmp_path / "gate"
    members = gang([f"echo run >> {runs}/$INTERLINK_GROUP_RANK; while [ ! -e {gate} ]; do sleep 0.05; done"] * 2)
    settings = settings_for(tmp_path / "state", nats_url, pool=pool)
    a, first = await submit_until_crash(settings, members, "submitted")

    async def launched() -> bool:
        return len(list(runs.iterdir())) == 2

    await wait_for(launched, timeout=20, what="the gang to start")
    await crash(a)
    await first.close()
    await a.stop()
    second = CountingShell()
    async with Submitter(settings, backend=second):
        client = submitter_client(nc, pool, timeout=30)
        again = await client.submit_group(pb.SubmitGroupRequest(members=members))
        assert not again.created
        gate.touch()
        final = await statuses(client, uids(members))
        assert [s.state for s in final] == [pb.JobState.SUCCEEDED] * 2
        assert second.gang_submits == [] and second.single_submits == [], "found again, never resubmitted"
    assert {p.read_text() for p in runs.iterdir()} == {"run\n"}


async def expect_invalid(client: pb.SubmitterServiceStub, members: list[pb.JobScript], field: str) -> None:
    with pytest.raises(GRPCError) as err:
        await client.submit_group(pb.SubmitGroupRequest(members=members))
    assert err.value.status == Status.INVALID_ARGUMENT
    assert field in (err.value.message or ""), err.value.message


async def test_a_malformed_group_is_refused_naming_the_field(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell
) -> None:
    client = submitter_client(nc, pool)
    await expect_invalid(client, [], "members")
    members = gang(["true", "true"])
    members[1].gang.size = 3
    await expect_invalid(client, members, "members[1].gang.size")
    members = gang(["true", "true"])
    members[1].gang.rank = 0
    await expect_invalid(client, members, "members[1].gang.rank")
    members = gang(["true", "true"])
    members[1].gang.group_uid = "another"
    await expect_invalid(client, members, "members[1].gang.group_uid")
    members = gang(["true"])
    members[0].gang.group_uid = "../x"
    await expect_invalid(client, members, "members[0].gang.group_uid")
    members = gang(["true", "true"])
    members[1].gang = None
    await expect_invalid(client, members, "members[1].gang")
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=gang(["true"])[0]))
    assert err.value.status == Status.INVALID_ARGUMENT and "job.gang" in (err.value.message or "")
    assert backend.gang_submits == [] and backend.single_submits == []
    assert (await client.list_jobs(pb.ListJobsRequest(include_finished=True))).jobs == [], "nothing recorded"


async def test_htcondor_refuses_pod_groups_by_name_recording_nothing(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in standin.install(tmp_path / "bin", tmp_path / "condor").items():
        monkeypatch.setenv(key, value)  # its programs: a submitter without them does not start
    await ensure_events_stream(nc.jetstream())
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=pool, backend="htcondor")):
        client = submitter_client(nc, pool)
        members = gang(["true", "true"])
        with pytest.raises(GRPCError) as err:
            await client.submit_group(pb.SubmitGroupRequest(members=members))
        assert err.value.status == Status.FAILED_PRECONDITION
        assert "the htcondor backend does not run pod groups (SubmitGroup)" in (err.value.message or "")
        assert "parallel-universe" in (err.value.message or "")
        listed = await client.list_jobs(pb.ListJobsRequest(include_finished=True))
        assert listed.jobs == [], "the members are not recorded"


PODMAN = pb.BuildConfig(runtime=pb.ContainerRuntime.PODMAN)


def podman_gang(tmp_path: Path, commands: Sequence[str], **spec: object) -> GangSpec:
    """A gang whose member ``rank`` runs ``commands[rank]`` in a busybox container under podman."""
    members = []
    for rank, cmd in enumerate(commands):
        pod_uid = uid()
        pod = {
            "metadata": {"name": f"m{rank}", "namespace": "default", "uid": pod_uid},
            "spec": {"containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", cmd]}], **spec},
        }
        job_dir = tmp_path / "jobs" / pod_uid
        prepare_job_dir(job_dir, render_job({"pod": pod}, PODMAN).script)
        members.append(JobSpec(pod_uid, job_dir, job_dir / "job.sh", namespace="default", name=f"m{rank}"))
    group = f"g-{uuid.uuid4()}"
    return GangSpec(group, "pg", tmp_path / "gangs" / group, tuple(members))


@pytest.fixture
async def podman_shell(podman_host: PodmanHost) -> AsyncIterator[ShellBackend]:
    # A site's longest grace far shorter than the pods' own (rendered without it): the submitter kills the scripts'
    # whole trees before they can clean up themselves.
    shell = ShellBackend(max_concurrent=2, kill_grace_s=0.5)
    shell.configure(
        pb.BuildConfig(runtime=pb.ContainerRuntime.PODMAN, limits=pb.PodLimits(max_termination_grace_seconds=1))
    )
    await shell.start()
    yield shell
    await shell.close()


def containers_of(host: PodmanHost, spec: GangSpec) -> list[object]:
    return [c for m in spec.members for c in host.containers(f"{layout.LABEL_POD_UID}={m.uid}")]


@pytest.mark.podman
async def test_a_gang_runs_its_members_through_podman(podman_shell: ShellBackend, tmp_path: Path) -> None:
    """The pool's runtime podman: the same member scripts, each member's container in podman, one gang job."""
    spec = podman_gang(tmp_path, ["echo member0", "echo member1"])
    job_id = await podman_shell.submit_gang(spec)
    handle = JobHandle(spec.uid, spec.job_dir, job_id)

    async def ended() -> Observation | None:
        obs = (await podman_shell.poll([handle])).get(spec.uid)
        return obs if obs is not None and obs.state.terminal else None

    obs = await wait_for(ended, timeout=90, what="the gang to end")
    assert obs.state is BackendState.COMPLETED, obs
    for rank, m in enumerate(spec.members):
        assert (m.job_dir / "containers" / "main.log").read_text() == f"member{rank}\n"
        assert (m.job_dir / layout.GANG_MEMBER_EXIT).read_text().strip() == "0"
    assert (await podman_shell.find_gang(spec)).job_id == spec.uid


@pytest.mark.podman
async def test_cancel_and_the_start_up_sweep_remove_every_members_containers(
    podman_host: PodmanHost, podman_shell: ShellBackend, tmp_path: Path
) -> None:
    cancelled = podman_gang(tmp_path, ["sleep 600"] * 2, terminationGracePeriodSeconds=300)
    killed = podman_gang(tmp_path, ["sleep 600"] * 2)
    for spec in (cancelled, killed):
        await podman_shell.submit_gang(spec)
    for spec in (cancelled, killed):
        await wait_for(
            lambda s=spec: asyncio.to_thread(lambda: len(containers_of(podman_host, s)) == 2),  # type: ignore[misc]
            timeout=90,
            what="both members' containers running",
        )
    await podman_shell.cancel(JobHandle(cancelled.uid, cancelled.job_dir, cancelled.uid))
    await wait_for(  # once the job's tree is gone: killed at the site's longest grace (1 s) + kill_grace_s
        lambda: asyncio.to_thread(lambda: containers_of(podman_host, cancelled) == []),
        timeout=60,
        what="the janitor to remove every member's containers",
    )
    # The gang's job dies at once (a crash, a reboot of the runner): its members' containers run on.
    os.killpg(int((killed.job_dir / ".shell.pid").read_text()), signal.SIGKILL)
    await podman_shell.close()
    assert len(containers_of(podman_host, killed)) == 2, "left running by the killed job"
    restarted = ShellBackend(max_concurrent=2, kill_grace_s=0.5)
    restarted.configure(PODMAN)
    await restarted.start()
    try:
        assert containers_of(podman_host, killed) == [], "the start-up sweep knows a member by its gang"
    finally:
        await restarted.close()
