"""A submitter that cannot submit says so, and never submits what its caller gave up on.

Against the in-memory FakeBackend with a manual clock (milliseconds each): a Submit's deadline (its ``Rpc-Timeout``)
is kept with the claim; a job not handed to the backend by then is never submitted, by the Submit itself or by
recovery after a crash; an error answer ends the caller's wait; a missing program refuses the start and, found
missing while serving, every Submit at once; the gateway's re-sends (on a real nats-server) still join the one
submission. The real-process versions (real Slurm, a PATH without ``sbatch``) are in test_slurm_commands.py.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import NatsChannel
from interlink_nats.services.gateway.pool_client import SUBMIT_ROUTE
from interlink_nats.submitters.backends.commands import commands_problem
from interlink_nats.submitters.backends.htcondor.backend import HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import BackendUnavailable, BatchCommand
from interlink_nats.submitters.core.errors import CannotSubmit, Refused, SubmitterError, Unavailable
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.core.site_policy import AccountingPolicy
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import FakeBackend, SimulatedCrash, crash, offline_submitter, settings_for


def job(uid: str) -> pb.JobScript:
    return pb.JobScript(
        pod=pb.PodRef(uid=uid, namespace="ns", name=f"pod-{uid[:8]}"), containers=["main"], script="true\n"
    )


def group(group_uid: str, uids: list[str]) -> pb.SubmitGroupRequest:
    members = []
    for rank, uid in enumerate(uids):
        member = job(uid)
        member.gang = pb.GangMember(group_uid=group_uid, group_name="g", rank=rank, size=len(uids))
        members.append(member)
    return pb.SubmitGroupRequest(members=members)


async def status_of(sub: Submitter, uid: str) -> pb.JobStatus:
    return (await sub.queries.get_status([uid])).statuses[0]


async def submit_and_crash_before_the_backend(sub: Submitter, request: pb.JobScript, deadline: float) -> None:
    """The submitter dies with the job's directory written and the backend not called yet (kill -9)."""

    def die(step: str) -> None:
        if step == "job_dir":
            raise SimulatedCrash(step)

    sub.submissions.on_step = die
    with pytest.raises(SimulatedCrash):
        await sub.submissions.submit(request, deadline=deadline)
    await crash(sub)


@pytest.mark.parametrize(("down_for", "submitted"), [(10.0, 1), (31.0, 0)], ids=["restart-in-time", "restart-late"])
async def test_recovery_never_submits_a_job_whose_caller_gave_up(
    tmp_path: Path, down_for: float, submitted: int
) -> None:
    backend, clock, uid = FakeBackend(), ManualClock(), str(uuid.uuid4())
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        await submit_and_crash_before_the_backend(a, job(uid), deadline=clock.time() + 30)
    clock.advance(down_for)
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        assert len(backend.submissions(uid)) == submitted
        if not submitted:  # the gateway answered its create with an error: the pod must not run behind its back
            status = await status_of(a, uid)
            assert status.state == pb.JobState.FAILED and "gave up" in status.message
            assert await a.queries.job_phase(uid) is Phase.DONE
            await a.recover()  # the periodic recovery: still nothing
            assert backend.submissions(uid) == []


async def test_a_submit_whose_deadline_passed_before_the_backend_call_is_dropped(tmp_path: Path) -> None:
    """The Submit goes on after its caller's deadline (shielded), but does not start the job any more."""
    backend, clock, uid = FakeBackend(), ManualClock(), str(uuid.uuid4())
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        a.submissions.on_step = lambda step: clock.advance(31) if step == "job_dir" else None
        with pytest.raises(Refused, match="gave up"):
            await a.submissions.submit(job(uid), deadline=clock.time() + 30)
        assert backend.submissions(uid) == []
        assert (await status_of(a, uid)).state == pb.JobState.FAILED


async def test_an_error_answer_ends_the_wait_so_recovery_does_not_submit_it(tmp_path: Path) -> None:
    """The caller was told "unavailable": it retries with a new Submit or gives up; recovery never goes on alone."""
    backend, clock, uid = FakeBackend(), ManualClock(), str(uuid.uuid4())
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        backend.fail("submit", BackendUnavailable("slurmctld down"))
        with pytest.raises(Unavailable):
            await a.submissions.submit(job(uid), deadline=clock.time() + 30)
        assert await a.queries.job_phase(uid) is Phase.SUBMITTING, "the intent stays for the caller's retry"
        await crash(a)
    clock.advance(1)  # well inside the first request's 30 s
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        assert backend.submissions(uid) == []
        assert (await status_of(a, uid)).state == pb.JobState.FAILED


async def test_a_retry_after_an_error_answer_submits_with_its_own_deadline(tmp_path: Path) -> None:
    backend, clock, uid = FakeBackend(), ManualClock(), str(uuid.uuid4())
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        backend.fail("submit", BackendUnavailable("slurmctld down"))
        with pytest.raises(Unavailable):
            await a.submissions.submit(job(uid), deadline=clock.time() + 30)
        clock.advance(0.5)
        assert (await a.submissions.submit(job(uid), deadline=clock.time() + 30)).job_id
        await a.recover()
        assert len(backend.submissions(uid)) == 1


async def test_a_gang_whose_caller_gave_up_is_never_submitted_by_recovery(tmp_path: Path) -> None:
    backend, clock = FakeBackend(), ManualClock()
    gid, uids = str(uuid.uuid4()), [str(uuid.uuid4()) for _ in range(2)]
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        backend.fail("submit_gang", BackendUnavailable("slurmctld down"))
        with pytest.raises(Unavailable):
            await a.gangs.submit_group(group(gid, uids), deadline=clock.time() + 30)
        await crash(a)
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        assert backend.submissions(gid) == []
        for uid in uids:
            assert (await status_of(a, uid)).state == pb.JobState.FAILED


async def test_a_missing_program_refuses_the_start_naming_it_and_its_setting(tmp_path: Path) -> None:
    backend = FakeBackend()
    program = tmp_path / "bin" / "fake-submit"
    backend.programs = [BatchCommand(str(program), "fake.submit")]
    with pytest.raises(
        SubmitterError, match=rf"fake cannot submit: {program} does not exist \(set its path with fake\.submit\)"
    ):
        async with offline_submitter(tmp_path / "state", backend, instance_id="a"):
            pass
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o644)
    with pytest.raises(SubmitterError, match="is not an executable file"):
        async with offline_submitter(tmp_path / "state", backend, instance_id="a"):
            pass


async def test_a_program_removed_while_serving_refuses_each_submit_at_once_until_it_is_back(tmp_path: Path) -> None:
    backend, clock = FakeBackend(), ManualClock()
    program = tmp_path / "fake-submit"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    backend.programs = [BatchCommand(str(program), "fake.submit")]
    async with offline_submitter(tmp_path / "state", backend, instance_id="a", clock=clock) as a:
        program.unlink()
        a.commands.refresh()  # what every poll does
        uid = str(uuid.uuid4())
        with pytest.raises(CannotSubmit, match=r"fake cannot submit: .*fake-submit does not exist"):
            await a.submissions.submit(job(uid), deadline=clock.time() + 30)
        assert backend.submissions(uid) == [] and backend.calls == 0, "the backend is not even asked"
        assert await a.queries.job_phase(uid) is Phase.SUBMITTING, "not failed: a retry after the fix goes on"
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
        assert (await a.submissions.submit(job(uid), deadline=clock.time() + 30)).job_id
        assert len(backend.submissions(uid)) == 1 and a.commands.problem is None


def names(commands: list[BatchCommand]) -> list[tuple[str, str]]:
    return [(c.program, c.setting) for c in commands]


def test_each_backend_declares_the_programs_it_runs_on_this_host() -> None:
    """One declaration per backend (``Backend.commands``), following its settings and BuildConfig."""
    slurm = SlurmBackend(SlurmConfig(sbatch="/opt/slurm/bin/sbatch"))
    assert names(slurm.commands()) == [
        ("/opt/slurm/bin/sbatch", "slurm.sbatch"),
        ("squeue", "slurm.squeue"),
        ("scancel", "slurm.scancel"),
        ("sinfo", "slurm.sinfo"),
    ]
    slurm.configure(pb.BuildConfig(backends=pb.BackendOptions(slurm=pb.SlurmOptions(use_sacct=True))))
    assert ("sacct", "slurm.sacct") in names(slurm.commands())
    condor = HTCondorBackend(HTCondorConfig(mode="remote", use_condor_status=True), pool="p")
    assert [p for p, _ in names(condor.commands())] == [
        *("condor_submit", "condor_q", "condor_history", "condor_rm", "condor_transfer_data", "condor_status")
    ]
    assert [p for p, _ in names(HTCondorBackend(HTCondorConfig(), pool="p").commands())] == [
        *("condor_submit", "condor_q", "condor_history", "condor_rm")
    ]
    switching = AccountingPolicy.model_validate({"default": {"run_as_user": "nobody"}})
    shell = ShellBackend(bash="/bin/bash", accounting=switching)
    assert names(shell.commands()) == [("/bin/bash", "shell.bash"), ("setpriv", "")]
    shell.configure(pb.BuildConfig(runtime=pb.ContainerRuntime.PODMAN, executable="/usr/bin/podman"))
    assert names(shell.commands())[-1] == ("/usr/bin/podman", "build_config.executable")
    assert names(ShellBackend().commands()) == [("bash", "shell.bash")]


def test_a_program_named_without_a_setting_says_to_install_it(tmp_path: Path) -> None:
    problem = commands_problem([BatchCommand("setpriv", ""), BatchCommand("sh", "x.sh")], path=str(tmp_path))
    fixes = "setpriv (install it or put it on PATH), sh (set its path with x.sh)"
    assert problem == f"not on PATH ({tmp_path}) or not executable: {fixes}"
    assert commands_problem([BatchCommand("sh", "x.sh")], path="/bin:/usr/bin") is None


async def test_the_gateways_resends_join_the_submission_under_its_deadline(tmp_path: Path, nats_url: str) -> None:
    """A Submit unanswered for ``submit_resend_s`` is sent again with the time left (commit 2456b47): each copy joins
    the one submission, the pod runs once, and the row keeps the caller's deadline (not extended by the copies)."""
    nc = await nats.connect(nats_url)
    await ensure_events_stream(nc.jetstream())
    backend, pool, uid = FakeBackend(), f"dl{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    backend.slow("submit", 1.0)  # several resend periods
    try:
        async with Submitter(settings_for(tmp_path, nats_url, pool=pool), backend=backend) as sub:
            sent = time.time()
            request = bytes(pb.SubmitRequest(job=job(uid)))
            reply = await NatsChannel(nc, pool).unary(SUBMIT_ROUTE, request, timeout=30, resend_every_s=0.2)
            assert pb.SubmitResponse.parse(reply).job_id and len(backend.submissions(uid)) == 1
            row = await sub.registry.get(uid) if sub.registry is not None else None
            assert row is not None and row.deadline is not None
            assert sent + 29 < row.deadline < sent + 31, row.deadline - sent
    finally:
        await nc.close()
