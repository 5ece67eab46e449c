"""Submit and cancel: the two RPCs that change a job, executed as the lifecycle core plans them.

Submit: claim (durable intent) → job directory → backend → mark submitted → track. Idempotent
by pod UID, and shielded so a caller's deadline cannot interrupt it halfway; but a job that has not reached
the backend by that deadline never does (the caller has given up on it: recorded failed, ``lifecycle.gave_up``),
and an error answer ends the wait (its row's deadline becomes now), so recovery never submits it behind the
caller's back. The backend's programs are checked before and after a failed submission (``backends.commands``):
while one is missing, a Submit is refused at once, naming it.
Cancel: stop the job, remove its files, keep a tombstone (so it never runs again). Idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import Clock
from interlink_nats.kernel.log_context import bind as bind_log_fields
from interlink_nats.submitters.backends.commands import CommandCheck
from interlink_nats.submitters.core import fastwire
from interlink_nats.submitters.core.backend import (
    Backend,
    BackendError,
    BackendUnavailable,
    JobHandle,
    MakesLayout,
    ReadsScriptOptions,
    Reconciled,
)
from interlink_nats.submitters.core.errors import CannotSubmit, InvalidRequest, Refused, Unavailable
from interlink_nats.submitters.core.lifecycle import (
    Answer,
    CancelPlan,
    CannotRun,
    ClaimPlan,
    FailPod,
    Phase,
    RetryLater,
    SubmitAction,
    gave_up,
    later,
    needs_owner_check,
    past_deadline,
    plan_cancel,
    plan_claim,
    plan_resume,
    plan_submit,
)
from interlink_nats.submitters.core.requests import check_job, job_layout
from interlink_nats.submitters.core.status import JobMeta, cancelled_status, map_status, submit_failed_status
from interlink_nats.submitters.core.storage_check import check_storage
from interlink_nats.submitters.engine.polling import Poller, meta_from_row
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.state.batching import BatchRunner
from interlink_nats.submitters.state.outbox import Outbox
from interlink_nats.submitters.state.ownership import InstanceLock
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import JobRow, StatusUpdate


def _no_outcome(ok: bool) -> None:
    return None


def _no_step(step: str) -> None:
    return None


_NO_POD = pb.PodRef()
"""A job without a pod reads as this empty one (read only). Tested with ``is not None``: a message's truth
value in betterproto2 walks every field for defaults (~6 µs), and a Submit asked it three times."""


def _no_storage() -> pb.StoragePolicy | None:
    return None


def validate_job(
    job: pb.JobScript, storage: Callable[[], pb.StoragePolicy | None] = _no_storage, backend: object = None
) -> None:
    """Reject what could never run or is unsafe to use, naming the field (raises :class:`InvalidRequest`):
    any NATS client may send a job, so it is checked here again (``core.requests``), its storage volumes with
    the site's policy (``storage``: the one in force; none maps nothing), its script with the batch system's
    grammar where that reads options from it (``backend``: :class:`ReadsScriptOptions`)."""
    check_job(job)
    if job.storage:
        check_storage(job, storage())
    check_script_options(job.script, backend)


_READS_SCRIPT_OPTIONS: dict[type, bool] = {}


def _reads_script_options(kind: type) -> bool:
    """Whether a backend class reads options from scripts, asked once per class: a runtime protocol's
    ``isinstance`` walks the protocol's members on every call (7 µs here), and every Submit asks."""
    known = _READS_SCRIPT_OPTIONS.get(kind)
    if known is None:
        known = _READS_SCRIPT_OPTIONS[kind] = issubclass(kind, ReadsScriptOptions)
    return known


def check_script_options(script: str, backend: object) -> None:
    """:class:`InvalidRequest` naming ``job.script`` when ``backend``'s batch system would read options from it
    (:class:`ReadsScriptOptions`); nothing to check for any other backend."""
    if backend is not None and _reads_script_options(type(backend)):
        try:
            cast(ReadsScriptOptions, backend).check_script(script, field="job.script")  # not isinstance: its cost
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None


def _job_dirs_runner() -> BatchRunner[jobfiles.JobDirItem, Path]:
    return BatchRunner(jobfiles.prepare_job_dirs, name="submitter-job-dirs")


@dataclass(eq=False, repr=False, slots=True, kw_only=True)
class Submissions:
    """Submit and cancel for one instance. Its dependencies are public: ``engine.gangs`` and ``engine.recovery``
    claim, record, resubmit and track through them as Submit does."""

    pool: str
    state_dir: Path
    lock: InstanceLock
    registry: Callable[[], Registry]
    """The open registry; raises ``errors.Unavailable`` when the submitter is not running."""
    backend: Backend
    poller: Poller
    outbox: Outbox
    clock: Clock
    commands: CommandCheck
    """The backend's programs: checked before a submission while they were missing, and after one failed."""
    storage: Callable[[], pb.StoragePolicy | None] = _no_storage
    """The site's storage policy in force (the announced BuildConfig's): a job's volumes are checked with it."""
    inflight: dict[str, asyncio.Task[pb.SubmitResponse]] = field(init=False, default_factory=dict)
    deadlines: dict[str, float | None] = field(init=False, default_factory=dict)
    """By uid, while its Submit runs: when its callers stop waiting (unix time; None: never). A repeat that joins
    it may extend it (``lifecycle.later``); the registry keeps the first request's, or a resumed one's."""
    group_inflight: dict[str, asyncio.Task[pb.SubmitGroupResponse]] = field(init=False, default_factory=dict)
    """By member uid: the SubmitGroup submitting that pod's gang (``engine.gangs``)."""
    _gang_cancels: dict[str, tuple[asyncio.Lock, int]] = field(init=False, default_factory=dict)
    """By group uid: the lock that orders its members' cancels, and how many cancels use it."""
    job_dirs: BatchRunner[jobfiles.JobDirItem, Path] = field(init=False, default_factory=_job_dirs_runner)
    stopping: bool = field(init=False, default=False)
    recover_needed: bool = field(init=False, default=False)
    """Set when a Submit adopted a stopped replica's jobs: the rest are tracked on the next poll."""
    on_submit: Callable[[bool], None] = field(init=False, default=_no_outcome)
    """Called after each backend submit: False when it raised (the pool's recent failures, ``core.load``)."""
    on_step: Callable[[str], None] = field(init=False, default=_no_step)
    """Called after each durable step of a Submit (``claimed``, ``job_dir``, ``submitted``, ``marked``):
    the seam crash tests use to stop a submitter between any two steps. A new claim's ``claimed``
    is called on the registry's writer thread (between the commit and the job directory)."""

    runner_makes_layout: bool = field(init=False, default=False)
    """The backend's runner makes a single job's layout and removes it (``MakesLayout``): the submitter writes
    only the job directory, ``containers/`` and ``job.sh``, and hands the layout over in ``JobSpec.layout``."""

    def __post_init__(self) -> None:
        self.runner_makes_layout = isinstance(self.backend, MakesLayout) and self.backend.makes_layout

    def handed_layout(self, job: pb.JobScript) -> tuple[layout.LayoutEntry, ...] | None:
        """The layout the backend's runner makes for this single job (``MakesLayout``), or None: the submitter
        makes it (another backend, no layout, or one it cannot take: the script then makes it, as before)."""
        if not self.runner_makes_layout or not job.layout:
            return None
        try:
            return job_layout(job.layout)  # None: a kind this submitter does not know
        except InvalidRequest:
            return None

    def reopen(self) -> None:
        """Fresh job-directory writer (after a stop closed the previous one)."""
        self.stopping = False
        self.job_dirs = _job_dirs_runner()

    async def submit(self, job: pb.JobScript, *, deadline: float | None = None) -> pb.SubmitResponse:
        """Idempotent by pod UID; the work is shielded so a caller's deadline cannot interrupt it. ``deadline``:
        when this caller stops waiting (unix time; None: it never does)."""
        validate_job(job, self.storage, self.backend)
        if job.gang is not None:
            raise InvalidRequest("job.gang is set: a member of a pod group is submitted with SubmitGroup")
        if job.array is not None:
            raise InvalidRequest("job.array is set: a member of an array is submitted with SubmitGroup")
        pod = job.pod if job.pod is not None else _NO_POD
        if self.stopping:
            raise Unavailable("submitter is stopping")
        running = self.inflight.get(pod.uid)
        if running is not None:
            self.deadlines[pod.uid] = later(self.deadlines.get(pod.uid), deadline)
            resp = await asyncio.shield(running)
            return pb.SubmitResponse(job_id=resp.job_id, created=False, status=resp.status)
        self.deadlines[pod.uid] = deadline
        task = asyncio.ensure_future(self._submit(job, deadline))
        self.inflight[pod.uid] = task

        def done(_t: object) -> None:
            self.inflight.pop(pod.uid, None)
            self.deadlines.pop(pod.uid, None)

        task.add_done_callback(done)
        return await asyncio.shield(task)

    async def claim(
        self,
        job: pb.JobScript,
        job_dir: Path,
        *,
        gang: str = "",
        deadline: float | None = None,
        make_layout: bool = True,
    ) -> tuple[bool, JobRow]:
        """The durable intent (the registry row, with its caller's ``deadline``) and, for a new one, the job
        directory, written on the registry's writer thread right after the claim's commit: (created, row). A
        gang's members are claimed alike (``gang``: their group uid). ``make_layout`` False: the backend's runner
        makes the layout (:meth:`handed_layout`)."""
        pod = job.pod if job.pod is not None else _NO_POD
        script, entries = job.script, job.layout

        def write_job_dir() -> None:
            self.on_step("claimed")
            jobfiles.prepare_job_dir(job_dir, script, entries, make_layout=make_layout)

        try:
            return await self.registry().claim(
                uid=pod.uid,
                namespace=pod.namespace,
                name=pod.name,
                owner=self.lock.instance_id,
                job_dir=job_dir,
                init_containers=job.init_containers,
                containers=job.containers,
                spec=fastwire.job_spec(job),
                status=fastwire.pending_status(
                    pod.uid, pod.namespace, pod.name, self.pool, job.init_containers, job.containers
                ),
                then=write_job_dir,
                gang=gang,
                deadline=deadline,
            )
        except OSError as exc:
            raise Unavailable(f"cannot write the job directory: {exc}") from None

    async def _submit(self, job: pb.JobScript, deadline: float | None) -> pb.SubmitResponse:
        """Claim → job directory → backend → mark submitted; see the module docstring.

        Hot path: the claim and the mark each wait for a group commit shared with every concurrent
        Submit, and the two messages the registry keeps (spec, pending status) are encoded by
        ``fastwire``. A new claim's job directory is written on the registry's writer thread right
        after the claim's commit (``Registry.claim(then=...)``): the order of the durable steps is
        unchanged (claim committed, then the directory, then the backend), but it costs one thread
        hop instead of two. A resumed submission (crash, adoption) writes it on its own thread.
        """
        reg = self.registry()
        pod = job.pod if job.pod is not None else _NO_POD
        job_dir = jobfiles.job_dir_for(self.state_dir, pod.uid)
        meta = JobMeta(
            pod.uid,
            pod.namespace,
            pod.name,
            self.pool,
            "",
            tuple(job.init_containers),
            tuple(job.containers),
            self.backend.name,
        )
        script = job.script
        entries = job.layout
        handed = self.handed_layout(job)
        by_runner = handed is not None
        created, row = await self.claim(job, job_dir, deadline=deadline, make_layout=not by_runner)
        if not created:
            self.on_step("claimed")
            if row.gang and row.phase is Phase.SUBMITTING:  # never resumed alone: its group is one job
                raise InvalidRequest(
                    f"pod {pod.uid} is a member of pod group {row.gang}: it is submitted with SubmitGroup"
                )
        owner_dead = needs_owner_check(row.phase, row.owner, self.lock.instance_id) and await asyncio.to_thread(
            self.lock.owner_is_dead, row.owner
        )
        plan = plan_claim(
            created=created, phase=row.phase, owner=row.owner, me=self.lock.instance_id, owner_dead=owner_dead
        )
        if plan is ClaimPlan.ANSWER:
            return pb.SubmitResponse(job_id=row.job_id, created=False, status=row.job_status())
        if plan is ClaimPlan.ADOPT_AND_RESUME:
            await reg.adopt(row.owner, self.lock.instance_id)
            self.recover_needed = True
        if plan is not ClaimPlan.SUBMIT:
            # A caller waits for it again (the row's deadline may have passed: an error answer ends a wait).
            await reg.set_deadline([row.uid], self.deadlines.get(row.uid, deadline))
            found: Reconciled | BackendError | None
            try:
                found = (await self.backend.reconcile([JobHandle(row.uid, row.job_dir, row.job_id)])).get(row.uid)
            except BackendError as exc:
                found = exc
            resumed = plan_resume(self.backend.name, found)
            if resumed is not None:
                return await self._execute(resumed, row, meta, layout=bool(entries), by_runner=by_runner)
        if not created:  # resuming an interrupted submission: its directory may be missing or partial
            try:
                if by_runner:
                    await asyncio.to_thread(jobfiles.prepare_job_dir, job_dir, script, entries, make_layout=False)
                else:
                    await self.job_dirs.run((job_dir, script, entries))
            except OSError as exc:
                raise Unavailable(f"cannot write the job directory: {exc}") from None
        self.on_step("job_dir")
        if past_deadline(self.deadlines.get(row.uid, deadline), self.clock.time()):
            reason = gave_up(self.backend.name)
            return await self._execute(FailPod(reason, reason), row, meta, layout=bool(entries))
        spec = row.backend_spec(job)
        if handed is not None:
            spec = dataclasses.replace(spec, layout=handed, layout_marker=layout.tests_marker(script))
        outcome = await self.attempt(lambda: self.backend.submit(spec))
        action = plan_submit(self.backend.name, outcome, created=created, unusable=self.commands.problem)
        return await self._execute(action, row, meta, layout=bool(entries), by_runner=by_runner)

    async def attempt(self, submission: Callable[[], Awaitable[str]]) -> str | BackendError:
        """One backend submission (a job's or a gang's): its id, or the error as data for ``plan_submit`` to
        decide on; counted for the pool's recent failures and marked on the step seam once it succeeded.

        Not made while the backend's programs could not be run when last checked (they are checked again
        first); checked again after a failure, so ``commands.problem`` tells a missing ``sbatch`` from a
        transient failure (``plan_submit``'s ``unusable``)."""
        if self.commands.problem is not None and self.commands.refresh() is not None:
            return BackendUnavailable(self.commands.problem)
        try:
            job_id = await submission()
        except BackendError as exc:
            self.on_submit(False)
            self.commands.refresh()
            return exc
        self.on_submit(True)
        self.on_step("submitted")
        return job_id

    async def give_up(self, uids: list[str]) -> None:
        """An error answer ends its callers' wait: from now on only a new Submit (never recovery) submits these."""
        await self.registry().set_deadline(uids, self.clock.time())

    async def _execute(
        self, action: SubmitAction, row: JobRow, meta: JobMeta, *, layout: bool, by_runner: bool = False
    ) -> pb.SubmitResponse:
        """Carry out what ``plan_submit``/``plan_resume`` decided; the answer, or the domain error to raise."""
        if isinstance(action, RetryLater | CannotRun):
            await self.give_up([row.uid])
            raise Unavailable(action.message) if isinstance(action, RetryLater) else CannotSubmit(action.message)
        if isinstance(action, FailPod):
            await self.record_final(row, submit_failed_status(meta, action.reason, now=self.clock.time()))
            raise Refused(action.message)
        job_id = action.job_id
        await self.registry().mark_submitted(row.uid, job_id)
        self.on_step("marked")
        row.job_id = job_id
        bind_log_fields(job_id=job_id)
        async with self.poller.lock:
            self.poller.track(row, layout=layout, runner_layout=by_runner)
        if action.answer is Answer.CREATED:
            return pb.SubmitResponse(job_id=job_id, created=True)  # pending; the caller knows the containers
        if action.answer is Answer.STORED:
            return pb.SubmitResponse(job_id=job_id, created=False, status=row.job_status())
        pending = map_status(dataclasses.replace(meta, job_id=job_id), None, {}, now=self.clock.time())
        return pb.SubmitResponse(job_id=job_id, created=False, status=pending)

    async def record_final(self, row: JobRow, status: pb.JobStatus) -> None:
        revision = row.revision + 1
        stored = await self.registry().save_statuses(
            [StatusUpdate(row.uid, Phase.DONE, int(status.state), bytes(status), revision, self.clock.time())]
        )
        if stored:  # else cancelled meanwhile: the tombstone's event stands
            self.outbox.add(row.uid, status, revision)

    async def cancel(self, uid: str) -> pb.CancelResponse:
        """Stop the job, remove its files, keep a tombstone (so it never runs again). Idempotent."""
        reg = self.registry()
        for running in (self.inflight.get(uid), self.group_inflight.get(uid)):
            if running is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(running)
        row = await reg.get(uid)
        plan = plan_cancel(row.phase if row is not None else None)
        if row is None or not plan.found:
            return pb.CancelResponse(found=False)
        if not plan.tombstone:
            return pb.CancelResponse(found=True, status=row.job_status())
        if not row.gang:
            return await self._tombstone(reg, row, plan, [])
        # One member's cancel at a time per gang: the next one sees the first's tombstone and stops nothing again.
        lock, users = self._gang_cancels.get(row.gang, (asyncio.Lock(), 0))
        self._gang_cancels[row.gang] = (lock, users + 1)
        try:
            async with lock:
                return await self._tombstone(reg, row, plan, await reg.gang_rows(row.gang))
        finally:
            lock, users = self._gang_cancels[row.gang]
            if users > 1:
                self._gang_cancels[row.gang] = (lock, users - 1)
            else:
                del self._gang_cancels[row.gang]

    async def _tombstone(
        self, reg: Registry, row: JobRow, plan: CancelPlan, gang_rows: list[JobRow]
    ) -> pb.CancelResponse:
        """Cancel's work once it is to be a tombstone: untrack, stop the job, store and publish, remove the files."""
        uid = row.uid
        seen = self.poller.tracked.get(uid)
        started = seen.obs.started_at if seen is not None and seen.obs is not None else None  # its job's start
        if plan.untrack:
            async with self.poller.lock:
                self.poller.untrack(uid)
        target = self._cancel_target(row, gang_rows) if plan.stop_backend else None
        if target is not None:
            try:
                await self.backend.cancel(target)
            except BackendError as exc:
                raise Unavailable(f"cannot cancel job {row.job_id or uid}: {exc}") from None
        meta = meta_from_row(row, self.pool, self.backend.name)
        status = cancelled_status(meta, row.job_status(), now=self.clock.time(), started_at=started)
        revision = await reg.mark_deleted(uid, bytes(status), int(status.state), row.revision + 1)
        self.poller.files.forget(row.job_dir)
        await asyncio.to_thread(jobfiles.remove_job_dir, row.job_dir)
        if row.gang and all(r.phase is Phase.DELETED for r in gang_rows if r.uid != uid):
            # The last member gone: nothing reads the gang's directory any more (its job has ended or been cancelled).
            await asyncio.to_thread(jobfiles.remove_job_dir, jobfiles.gang_dir_of(row.job_dir, row.gang))
        self.outbox.add(uid, status, revision)
        return pb.CancelResponse(found=True, status=status)

    @staticmethod
    def _cancel_target(row: JobRow, gang_rows: list[JobRow]) -> JobHandle | None:
        """The job a cancel stops: the pod's own, or its gang's one job (cancelling it stops every member). A
        gang's job is cancelled once: not again when another member is already cancelled or ended (its
        tombstone, or the job's end, came first); the other members then end as the backend reports."""
        if not row.gang:
            return JobHandle(row.uid, row.job_dir, row.job_id)
        others = [r for r in gang_rows if r.uid != row.uid]
        if any(not r.phase.live for r in others):
            return None
        job_id = row.job_id or next((r.job_id for r in others if r.job_id), "")
        return JobHandle(row.gang, jobfiles.gang_dir_of(row.job_dir, row.gang), job_id)

    # --- what a pod group's submission uses (``engine.gangs.MemberSubmissions``) ------------------------
    def validate(self, job: pb.JobScript) -> None:
        """:func:`validate_job` with the site's storage policy in force and the backend's script grammar."""
        validate_job(job, self.storage, self.backend)

    def submitting_group(self, uids: list[str], task: asyncio.Task[pb.SubmitGroupResponse]) -> None:
        """``task`` submits these members' group: a Cancel of one (and recovery) waits for it to end."""
        for uid in uids:
            self.group_inflight[uid] = task

        def done(_t: object) -> None:
            for uid in uids:
                if self.group_inflight.get(uid) is task:
                    del self.group_inflight[uid]

        task.add_done_callback(done)

    async def take_over(self, rows: list[JobRow]) -> bool:
        """Adopt the rows another instance claimed when that instance is dead (its jobs are tracked on the next
        poll); False, adopting nothing more, as soon as one of those owners is alive (it is submitting them)."""
        me = self.lock.instance_id
        for owner in {r.owner for r in rows if needs_owner_check(r.phase, r.owner, me)}:
            if not await asyncio.to_thread(self.lock.owner_is_dead, owner):
                return False
            await self.registry().adopt(owner, me)
            self.recover_needed = True
        return True

    async def rewrite_job_dir(self, job_dir: Path, job: pb.JobScript) -> None:
        """A resumed submission's job directory (it may be missing or partial), written again."""
        try:
            await self.job_dirs.run((job_dir, job.script, job.layout))
        except OSError as exc:
            raise Unavailable(f"cannot write the job directory: {exc}") from None

    async def submit_planned(self, submission: Callable[[], Awaitable[str]], *, created: bool) -> SubmitAction:
        """One backend submission (:meth:`attempt`) and what ``plan_submit`` makes of its outcome."""
        outcome = await self.attempt(submission)
        return plan_submit(self.backend.name, outcome, created=created, unusable=self.commands.problem)

    async def fail_submission(self, row: JobRow, reason: str) -> None:
        """The pod failed before it ran (``reason`` in its status), recorded and published."""
        meta = meta_from_row(row, self.pool, self.backend.name)
        await self.record_final(row, submit_failed_status(meta, reason, now=self.clock.time()))

    async def track_submitted(self, rows: list[JobRow], job_id: str) -> None:
        """The live rows among these (a pod group's members) run as job ``job_id``: polled from now on."""
        async with self.poller.lock:
            for row in rows:
                if row.phase in (Phase.SUBMITTING, Phase.ACTIVE):
                    row.job_id = job_id
                    row.phase = Phase.ACTIVE
                    self.poller.track(row)
