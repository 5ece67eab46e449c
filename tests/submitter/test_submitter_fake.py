"""Crash, adoption, cancel and replica races against the in-memory FakeBackend (milliseconds each).

The real-process versions (kill -9 of a submitter process, real shell/Slurm) stay in
test_submitter_crash.py, test_submitter_shell.py and test_slurm.py; these cover every step
boundary cheaply. A "crash" leaves what kill -9 leaves: committed registry rows, job
directories and the batch system's jobs; the in-memory state and the instance lock go.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend
from interlink_nats.submitters.core.backend import (
    Backend,
    BackendState,
    BackendUnavailable,
    Observation,
    SubmitRejected,
)
from interlink_nats.submitters.core.errors import InvalidRequest, Refused, Unavailable
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.core.status import ContainerFiles
from interlink_nats.submitters.engine.polling import HOT_POLLS, SWEEP_MAX, SWEEP_POLLS
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import FakeBackend, SimulatedCrash, crash, offline_submitter


def job(uid: str, containers: tuple[str, ...] = ("main",)) -> pb.JobScript:
    return pb.JobScript(
        pod=pb.PodRef(uid=uid, namespace="ns", name=f"pod-{uid[:8]}"),
        containers=list(containers),
        script="#!/bin/bash\ntrue\n",
    )


def new_uid() -> str:
    return str(uuid.uuid4())


@contextlib.asynccontextmanager
async def two_replicas(state_dir: Path, backend: FakeBackend) -> AsyncIterator[tuple[Submitter, Submitter]]:
    """Replicas a and b of one pool: one registry, one batch system."""
    async with (
        offline_submitter(state_dir, backend, instance_id="a") as a,
        offline_submitter(state_dir, backend, instance_id="b") as b,
    ):
        yield a, b


async def phase_of(sub: Submitter, uid: str) -> Phase | None:
    return await sub.queries.job_phase(uid)


async def settle(sub: Submitter) -> None:
    """Polls until nothing changes (a FakeBackend answers at once)."""
    for _ in range(5):
        if not (await sub.poll_once()).changed:
            return


async def running(sub: Submitter, backend: FakeBackend, count: int) -> list[str]:
    """``count`` new jobs, submitted and running, the submitter settled on that."""
    uids = [new_uid() for _ in range(count)]
    for uid in uids:
        await sub.submissions.submit(job(uid))
        backend.start_running(uid)
    await settle(sub)
    return uids


SUBMIT_STEPS = ["claimed", "job_dir", "submitted", "marked"]


async def submit_and_crash_at(state_dir: Path, backend: FakeBackend, uid: str, step: str) -> None:
    """Replica "a" submits ``uid`` and dies right after ``step`` (see ``Submissions.on_step``)."""
    async with offline_submitter(state_dir, backend, instance_id="a") as a:

        def die(at: str) -> None:
            if at == step:
                raise SimulatedCrash(at)

        a.submissions.on_step = die
        with pytest.raises(SimulatedCrash):
            await a.submissions.submit(job(uid))
        await crash(a)


@pytest.mark.parametrize("step", SUBMIT_STEPS)
async def test_a_crash_between_any_two_submit_steps_runs_the_job_exactly_once(tmp_path: Path, step: str) -> None:
    backend = FakeBackend()
    uid = new_uid()
    await submit_and_crash_at(tmp_path, backend, uid, step)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        # The caller retries (it never got an answer); recovery may already have resumed the job.
        resp = await a.submissions.submit(job(uid))
        assert resp.job_id
        assert len(backend.submissions(uid)) == 1, "the pod must run exactly once"
        assert await phase_of(a, uid) is Phase.ACTIVE
        backend.finish(uid)
        await settle(a)
        assert await phase_of(a, uid) is Phase.DONE
        status = (await a.queries.get_status([uid])).statuses[0]
        assert status.state == pb.JobState.SUCCEEDED


@pytest.mark.parametrize("after", [False, True], ids=["before-backend-got-it", "after-backend-got-it"])
async def test_recovery_after_a_crash_inside_the_backend_call_needs_no_retry(tmp_path: Path, after: bool) -> None:
    backend = FakeBackend()
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        backend.crash("submit", after=after)
        with pytest.raises(SimulatedCrash):
            await a.submissions.submit(job(uid))
        await crash(a)
    assert len(backend.submissions(uid)) == (1 if after else 0)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        # No retry: the script is stored, so recovery alone submits (or finds) the job.
        assert a.tracked == 1
        assert len(backend.submissions(uid)) == 1
        assert await phase_of(a, uid) is Phase.ACTIVE


async def test_an_interrupted_submission_without_a_script_waits_for_the_retry(tmp_path: Path) -> None:
    backend = FakeBackend()
    uid = new_uid()
    await submit_and_crash_at(tmp_path, backend, uid, "claimed")
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        assert a.tracked == 0
        assert backend.submissions(uid) == []
        assert await phase_of(a, uid) is Phase.SUBMITTING
        await a.submissions.submit(job(uid))
        assert len(backend.submissions(uid)) == 1


async def test_a_restart_sweeps_job_directories_a_crash_left_half_removed(tmp_path: Path) -> None:
    """remove_job_dir renames a directory aside before removing it; a crash in between must not leave it forever."""
    backend = FakeBackend()
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        await a.submissions.submit(job(uid))
        await crash(a)
    jobs = jobfiles.jobs_root(tmp_path)
    half_removed = jobs / f"{jobfiles.REMOVING_PREFIX}{new_uid()}-0a1b2c3d"
    (half_removed / layout.CONTAINERS_DIR).mkdir(parents=True)
    (half_removed / layout.CONTAINERS_DIR / "main.exit").write_text("143\n")
    gang_removed = tmp_path / layout.GANG_DIR / f"{jobfiles.REMOVING_PREFIX}g-{new_uid()}-0a1b2c3d"  # a pod group's
    gang_removed.mkdir(parents=True)
    (gang_removed / layout.SCRIPT_NAME).write_text("#!/bin/bash\n")
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        assert not half_removed.exists()
        assert not gang_removed.exists()
        assert sorted(p.name for p in jobs.iterdir()) == [uid], "the live job's directory stays"
        assert (jobs / uid / layout.SCRIPT_NAME).is_file()
        assert a.tracked == 1


async def test_a_live_replica_adopts_a_crashed_ones_jobs_without_running_them_again(tmp_path: Path) -> None:
    backend = FakeBackend()
    uids = [new_uid() for _ in range(5)]
    async with two_replicas(tmp_path, backend) as (a, b):
        for u in uids[:4]:
            await a.submissions.submit(job(u))
        backend.crash("submit", after=True)  # the fifth reached the batch system, a never heard its id
        with pytest.raises(SimulatedCrash):
            await a.submissions.submit(job(uids[4]))
        assert await b.recovery.adopt_dead_owners() == 0, "a is alive: nothing to adopt"
        await crash(a)
        assert await b.recovery.adopt_dead_owners() == 5
        await b.recover()
        assert b.tracked == 5
        assert all(len(backend.submissions(u)) == 1 for u in uids)
        for u in uids:
            backend.finish(u)
        await settle(b)
        resp = await b.queries.get_status(uids)
        assert [s.state for s in resp.statuses] == [pb.JobState.SUCCEEDED] * 5
        assert set(b.outbox.pending) == set(uids), "b publishes the adopted jobs' events"


async def test_replicas_racing_on_one_pod_submit_it_once(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.slow("submit", 0.01)
    uid = new_uid()
    async with two_replicas(tmp_path, backend) as (a, b):
        answers = await asyncio.gather(
            a.submissions.submit(job(uid)), b.submissions.submit(job(uid)), a.submissions.submit(job(uid))
        )
        assert len(backend.submissions(uid)) == 1
        assert sum(r.created for r in answers) == 1
        assert a.tracked + b.tracked == 1


async def test_a_retry_of_someone_elses_live_submission_is_answered_not_resumed(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.slow("submit", 0.05)
    uid = new_uid()
    async with two_replicas(tmp_path, backend) as (a, b):
        first = asyncio.ensure_future(a.submissions.submit(job(uid)))
        await asyncio.sleep(0.01)  # a's claim is committed, its backend call is still running
        retried = await b.submissions.submit(job(uid))
        assert not retried.created
        assert (await first).created
        assert len(backend.submissions(uid)) == 1


async def test_cancel_racing_a_poll_keeps_the_tombstone(tmp_path: Path) -> None:
    backend = FakeBackend()
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        await a.submissions.submit(job(uid))
        backend.start_running(uid)
        backend.slow("poll", 0.05)
        poll = asyncio.ensure_future(a.poll_once())
        await asyncio.sleep(0.01)  # the poll is waiting for the backend
        resp = await a.submissions.cancel(uid)
        await poll
        assert resp.found
        assert resp.status is not None and resp.status.state == pb.JobState.CANCELLED
        assert await phase_of(a, uid) is Phase.DELETED
        assert backend.cancels == [uid]
        assert a.tracked == 0
        # Idempotent; and a later Submit of the same UID never runs it again.
        again = await a.submissions.cancel(uid)
        assert again.found and again.status is not None and again.status.state == pb.JobState.CANCELLED
        assert backend.cancels == [uid]
        assert not (await a.submissions.submit(job(uid))).created
        assert len(backend.submissions(uid)) == 1


async def test_a_cancel_by_another_replica_during_a_poll_keeps_the_tombstone(tmp_path: Path) -> None:
    """Replica b cancels a job that replica a owns while a's poll is out: a's view of the job
    (the backend now says cancelled) must not overwrite b's tombstone, nor be published."""
    backend = FakeBackend()
    uid = new_uid()
    async with two_replicas(tmp_path, backend) as (a, b):
        await a.submissions.submit(job(uid))
        backend.start_running(uid)
        held = backend.hold("poll")
        poll = asyncio.ensure_future(a.poll_once())
        await held.entered.wait()
        assert (await b.submissions.cancel(uid)).found
        held.release.set()
        stats = await poll
        assert stats.changed == 0
        assert await phase_of(b, uid) is Phase.DELETED
        assert (await b.queries.get_status([uid])).statuses[0].state == pb.JobState.CANCELLED
        assert uid not in a.outbox.pending, "a publishes nothing for a job b cancelled"
        assert a.tracked == 0, "a stops polling a job that ended"


async def test_a_cancel_after_another_replicas_final_status_has_the_last_revision(tmp_path: Path) -> None:
    """The other order: a stores the job's end while b's cancel is at the backend. b's tombstone
    then gets the next revision, so the gateway's last word is the cancellation."""
    backend = FakeBackend()
    uid = new_uid()
    async with two_replicas(tmp_path, backend) as (a, b):
        await a.submissions.submit(job(uid))
        held = backend.hold("cancel")
        cancel = asyncio.ensure_future(b.submissions.cancel(uid))
        await held.entered.wait()
        backend.finish(uid, BackendState.FAILED, exit_code=3)
        assert (await a.poll_once()).changed == 1
        done = a.outbox.pending[uid]
        held.release.set()
        assert (await cancel).found
        tombstone = b.outbox.pending[uid]
        assert tombstone.revision == done.revision + 1
        assert tombstone.status.state == pb.JobState.CANCELLED
        assert (await a.queries.get_status([uid])).statuses[0].state == pb.JobState.CANCELLED


async def test_cancel_waits_for_a_submission_in_flight(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.slow("submit", 0.02)
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        submitted = asyncio.ensure_future(a.submissions.submit(job(uid)))
        await asyncio.sleep(0)
        resp = await a.submissions.cancel(uid)
        await submitted
        assert resp.found
        assert backend.submissions(uid)[0].cancelled
        assert a.tracked == 0


async def test_cancel_of_an_unknown_pod_and_a_failing_backend_cancel(tmp_path: Path) -> None:
    backend = FakeBackend()
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        assert not (await a.submissions.cancel(uid)).found
        await a.submissions.submit(job(uid))
        backend.fail("cancel", BackendUnavailable("scancel: connection refused"))
        with pytest.raises(Unavailable, match="cannot cancel job fake-1"):
            await a.submissions.cancel(uid)
        assert await phase_of(a, uid) is Phase.ACTIVE, "nothing changed: the caller retries"
        assert (await a.submissions.cancel(uid)).found
        assert await phase_of(a, uid) is Phase.DELETED


class ScriptOptionsFake(FakeBackend):
    """A batch system that also reads options from the script's header, with sbatch's grammar
    (``ReadsScriptOptions``)."""

    def check_script(self, script: str, *, field: str) -> None:
        SlurmBackend().check_script(script, field=field)


async def test_a_script_carrying_batch_options_is_refused_at_the_door_before_anything_is_written(
    tmp_path: Path,
) -> None:
    backend = ScriptOptionsFake()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        uid = new_uid()
        hostile = job(uid)
        hostile.script = "#!/bin/bash\n#SBATCH --uid=0\ntrue\n"
        with pytest.raises(InvalidRequest, match=r"^job\.script: line '#SBATCH --uid=0' is an sbatch directive"):
            await a.submissions.submit(hostile)
        assert await phase_of(a, uid) is None, "no intent recorded"
        assert not jobfiles.job_dir_for(tmp_path, uid).exists() and backend.calls == 0
        plain = new_uid()
        assert (await a.submissions.submit(job(plain))).job_id, "a script without any is submitted"
        assert jobfiles.job_dir_for(tmp_path, plain).exists()


async def test_recovery_checks_a_stored_job_at_the_door_again_before_resubmitting_it(tmp_path: Path) -> None:
    """A job claimed by an earlier version, whose door checked less (here: not the script's batch options), and
    interrupted before the batch system got it: recovery never hands it over unchecked; its pod fails, saying why."""
    older = FakeBackend()
    uid, joined = new_uid(), new_uid()
    hostile, harmless = job(uid), job(joined)
    hostile.script = "#!/bin/bash\n#SBATCH --uid=0\ntrue\n"
    harmless.script = "#!/bin/bash\r#SBATCH --uid=0\ntrue\n"  # one comment line to sbatch, as at the door
    async with offline_submitter(tmp_path, older, instance_id="a") as a:
        for stored in (hostile, harmless):
            older.crash("submit")
            with pytest.raises(SimulatedCrash):
                await a.submissions.submit(stored)
        await crash(a)
    backend = ScriptOptionsFake()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        assert backend.submissions(uid) == [] and a.tracked == 1
        assert len(backend.submissions(joined)) == 1, "the file is read as the door read the text"
        assert await phase_of(a, uid) is Phase.DONE
        status = (await a.queries.get_status([uid])).statuses[0]
        assert status.state == pb.JobState.FAILED
        assert "job.script: line '#SBATCH --uid=0' is an sbatch directive" in status.containers[0].message


async def test_submit_failures_map_to_domain_errors(tmp_path: Path) -> None:
    backend = FakeBackend()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        with pytest.raises(InvalidRequest, match="at least one container"):
            await a.submissions.submit(job(new_uid(), containers=()))
        transient = new_uid()
        backend.fail("submit", BackendUnavailable("slurmctld down"))
        with pytest.raises(Unavailable, match="fake is unavailable: slurmctld down"):
            await a.submissions.submit(job(transient))
        assert await phase_of(a, transient) is Phase.SUBMITTING, "the intent stays for the retry"
        assert (await a.submissions.submit(job(transient))).job_id
        refused = new_uid()
        backend.fail("submit", SubmitRejected("invalid account"))
        with pytest.raises(Refused, match="fake refused the job: invalid account"):
            await a.submissions.submit(job(refused))
        assert await phase_of(a, refused) is Phase.DONE
        status = (await a.queries.get_status([refused])).statuses[0]
        assert status.state == pb.JobState.FAILED
        assert refused in a.outbox.pending


async def test_a_vanished_job_is_lost_and_stale_duplicate_reports_change_nothing(tmp_path: Path) -> None:
    backend = FakeBackend()
    gone, done = new_uid(), new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        await a.submissions.submit(job(gone))
        await a.submissions.submit(job(done))
        backend.vanish(gone)
        backend.finish(done)
        await settle(a)
        states = {s.pod.uid: s.state for s in (await a.queries.get_status([gone, done])).statuses}
        assert states == {gone: pb.JobState.LOST, done: pb.JobState.SUCCEEDED}
        revisions = {u: e.revision for u, e in a.outbox.pending.items()}
        # The batch system repeats an old report: terminal jobs are no longer tracked, nothing moves.
        backend.report_stale(done, Observation(BackendState.RUNNING), times=3)
        for _ in range(3):
            stats = await a.poll_once()
            assert stats.changed == 0
        assert {u: e.revision for u, e in a.outbox.pending.items()} == revisions
        assert (await a.queries.get_status([done])).statuses[0].state == pb.JobState.SUCCEEDED


async def test_an_ended_jobs_layout_is_removed_by_the_submitter_that_made_it(tmp_path: Path) -> None:
    """The script leaves the layout the submitter made to the submitter (kernel/layout.py ENDED_JOB_LAYOUT):
    a job that ended loses its volumes, rootfs and marker, keeps its container files; a lost job, which may
    still run on a node cut off from the site, keeps its volumes until the pod is deleted; a job whose script made
    its own layout (none in its JobScript) is left to its script."""
    backend = FakeBackend()
    done, gone, own = new_uid(), new_uid(), new_uid()
    entries = [
        pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path=f"{layout.VOLUMES_DIR}/scratch", mode=0o777),
        pb.LayoutEntry(kind=pb.LayoutEntryKind.SYMLINK, path=f"{layout.ROOTFS_DIR}/main/s", target="volumes/scratch"),
    ]
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        dirs = {}
        for uid in (done, gone):
            script = job(uid)
            script.layout = entries
            await a.submissions.submit(script)
            dirs[uid] = jobfiles.job_dir_for(tmp_path, uid)
            assert (dirs[uid] / layout.ROOTFS_DIR / "main" / "s").is_symlink()
            (dirs[uid] / layout.VOLUMES_DIR / "scratch" / "data").write_text("scratch data")
        layout.exit_path(dirs[done], "main").write_text("0\n")  # the lost one left none: its end is unknown
        await a.submissions.submit(job(own))
        dirs[own] = jobfiles.job_dir_for(tmp_path, own)
        (dirs[own] / layout.ROOTFS_DIR).mkdir()  # what its script would make, and remove at its exit
        layout.exit_path(dirs[own], "main").write_text("0\n")
        backend.finish(own)
        backend.finish(done)
        backend.vanish(gone)
        await settle(a)
        states = {s.pod.uid: s.state for s in (await a.queries.get_status([done, gone, own])).statuses}
        assert states == {done: pb.JobState.SUCCEEDED, gone: pb.JobState.LOST, own: pb.JobState.SUCCEEDED}
    left = {
        name for name in layout.ENDED_JOB_LAYOUT if (dirs[done] / name).is_symlink() or (dirs[done] / name).exists()
    }
    assert not left
    assert layout.exit_path(dirs[done], "main").read_text() == "0\n"
    assert (dirs[gone] / layout.VOLUMES_DIR / "scratch" / "data").read_text() == "scratch data"
    assert (dirs[own] / layout.ROOTFS_DIR).is_dir()


async def test_a_failing_poll_changes_nothing_and_the_next_one_catches_up(tmp_path: Path) -> None:
    backend = FakeBackend()
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        await a.submissions.submit(job(uid))
        backend.finish(uid)
        backend.fail("poll", BackendUnavailable("squeue timed out"))
        with pytest.raises(BackendUnavailable):
            await a.poll_once()
        assert await phase_of(a, uid) is Phase.ACTIVE
        await settle(a)
        assert await phase_of(a, uid) is Phase.DONE


async def test_the_registry_and_statuses_use_the_injected_clock(tmp_path: Path) -> None:
    backend = FakeBackend()
    clock = ManualClock(start=1_900_000_000.0)
    uid = new_uid()
    async with offline_submitter(tmp_path, backend, instance_id="a", clock=clock) as a:
        await a.submissions.submit(job(uid))
        clock.advance(30)
        backend.finish(uid, BackendState.FAILED, exit_code=None)
        await settle(a)
        assert a.registry is not None
        row = await a.registry.get(uid)
        assert row is not None
        assert row.created_at == 1_900_000_000.0
        assert row.finished_at == 1_900_000_030.0
        status = (await a.queries.get_status([uid])).statuses[0]
        assert status.updated_at is not None and status.updated_at.timestamp() == 1_900_000_030.0


async def test_a_poll_reads_only_the_jobs_that_changed_and_the_sweep_catches_a_lost_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = FakeBackend()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        uids = await running(a, backend, 3)
        a.poller.sweep_max = 0  # no sweep until the end of the test
        reads: list[str] = []
        read = a.poller.files.read

        def counting(job_dir: Path, names: Sequence[str], cdir: str | None = None) -> dict[str, ContainerFiles]:
            reads.append(job_dir.name)
            return read(job_dir, names, cdir)

        monkeypatch.setattr(a.poller.files, "read", counting)
        for _ in range(HOT_POLLS + 1):
            await a.poll_once()
        reads.clear()
        assert (await a.poll_once()).changed == 0 and reads == [], "nothing changed: no job's files are read"

        async def main_phase(uid: str) -> pb.ContainerPhase:
            return (await a.queries.get_status([uid])).statuses[0].containers[0].phase

        # A container starts: the script writes its file, then notes the job in the change journal.
        job_dirs = [tmp_path / "jobs" / uid for uid in uids]
        layout.started_path(job_dirs[1], "main").write_text("1800000000\n")
        with layout.changes_path(job_dirs[1]).open("a") as journal:
            journal.write(uids[1] + "\n")
        assert (await a.poll_once()).changed == 1 and reads == [uids[1]]
        assert await main_phase(uids[1]) == pb.ContainerPhase.RUNNING

        # A change whose journal line was lost (two NFS clients appending at once) waits for the sweep.
        layout.started_path(job_dirs[0], "main").write_text("1800000000\n")
        assert (await a.poll_once()).changed == 0
        a.poller.sweep_max = SWEEP_MAX
        for _ in range(SWEEP_POLLS):
            await a.poll_once()
        assert await main_phase(uids[0]) == pb.ContainerPhase.RUNNING
        assert await main_phase(uids[2]) == pb.ContainerPhase.WAITING


async def test_a_full_poll_keeps_nothing_of_the_jobs_that_ended(tmp_path: Path) -> None:
    """The backend answers for every job at every poll (no ``ReportsChanges``): a job that ended is not kept
    among the hot ones either (see the shell backend's test of the incremental poll)."""
    backend = FakeBackend()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        uids = await running(a, backend, 3)
        assert a.poller._hot == set(uids), "running jobs that just changed are hot"
        for uid in uids:
            backend.finish(uid)
        await settle(a)
        assert not a.poller.tracked
        await a.poll_once()
        assert not a.poller._hot


def test_the_fake_backend_implements_the_backend_interface() -> None:
    assert isinstance(FakeBackend(), Backend)


async def test_an_idle_pool_polls_without_a_thread_hop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no job tracked there is nothing to read: the poll stays on the loop (a hop is two wake-ups of an idle
    submitter every poll); a tracked job's files are read off the loop, and once it ended the pool is idle again."""
    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(func: object, /, *args: object, **kwargs: object) -> object:
        hops.append(repr(func))  # a partial or a bound method: its repr names the method
        return await to_thread(func, *args, **kwargs)  # type: ignore[arg-type]

    backend = FakeBackend()
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        monkeypatch.setattr(asyncio, "to_thread", counted)
        await a.poll_once()
        assert not [h for h in hops if "_compute" in h], "an idle poll hopped to a thread"
        (uid,) = await running(a, backend, 1)
        assert [h for h in hops if "_compute" in h], "a tracked job's files are read off the loop"
        backend.finish(uid)
        await settle(a)
        assert not a.poller.tracked
        hops.clear()
        await a.poll_once()
        assert not [h for h in hops if "_compute" in h], "the pool is idle again once its job ended"
