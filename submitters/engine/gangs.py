"""SubmitGroup and a gang's recovery: every member of a pod group claimed durably, the group handed to the backend
ONCE, as one gang.

A gang is several ordinary registry rows (one per member pod: GetStatus, GetLogs, Cancel and events work
on each as on a single pod) whose ``gang`` column names the group; all share the gang's one backend job
id. Order of the durable steps, as for a single pod: claim every member (row + job directory) → the gang's
directory → ``find_gang`` when resuming, else ``submit_gang`` → mark every member submitted → track. The
caller's deadline, the check of the backend's programs and an error answer ending the wait work as for a single
pod: through :class:`MemberSubmissions`, the few steps of :class:`.submission.Submissions` a member goes through,
never its state. The decisions are :mod:`submitters.core.gangs`'; this module does the I/O.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import Clock
from interlink_nats.submitters.core.backend import Backend, BackendError, GangSpec, Reconciled, RunsGangs
from interlink_nats.submitters.core.errors import CannotSubmit, InvalidRequest, Refused, Unavailable
from interlink_nats.submitters.core.gangs import (
    GroupPlan,
    MemberRow,
    failure_policy,
    known_job_id,
    plan_gang_recovery,
    plan_group,
    refusal,
    validate_group,
)
from interlink_nats.submitters.core.lifecycle import (
    CannotRun,
    FailPod,
    Phase,
    RetryLater,
    SubmitAction,
    gave_up,
    past_deadline,
)
from interlink_nats.submitters.engine.polling import Poller
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import JobRow

log = logging.getLogger(__name__)


def _member_row(row: JobRow) -> MemberRow:
    return MemberRow(row.uid, row.phase, row.job_id, row.gang)


def gang_spec(state_dir: Path, rows: Sequence[JobRow], jobs: Sequence[pb.JobScript] | None = None) -> GangSpec:
    """The backend's view of a gang from its members' rows in rank order (``jobs``: the request's, when at hand)."""
    first = jobs[0] if jobs else rows[0].job_spec()
    gang = first.gang
    return GangSpec(
        uid=rows[0].gang,
        name=gang.group_name if gang is not None else "",
        job_dir=jobfiles.gang_dir_for(state_dir, rows[0].gang),
        members=tuple(row.backend_spec(jobs[i] if jobs else None) for i, row in enumerate(rows)),
        failure_policy=failure_policy(gang),
        namespace=rows[0].namespace,
    )


def _scripts_stored(rows: Sequence[JobRow]) -> bool:
    return all((r.job_dir / layout.SCRIPT_NAME).exists() for r in rows)


def _make_gang_dir(path: Path) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)


class MemberSubmissions(Protocol):
    """What a pod group's submission needs of single pods' (``Submissions``): each member is claimed, failed and
    tracked as a single pod is, the group submitted once with the same check of the backend's programs."""

    @property
    def backend(self) -> Backend: ...
    @property
    def state_dir(self) -> Path: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def on_step(self) -> Callable[[str], None]: ...
    @property
    def registry(self) -> Callable[[], Registry]: ...
    @property
    def group_inflight(self) -> Mapping[str, asyncio.Task[pb.SubmitGroupResponse]]:
        """By member uid: the SubmitGroup (or an array's recovery) submitting that pod now."""
        ...

    def validate(self, job: pb.JobScript) -> None: ...
    async def submit(self, job: pb.JobScript, *, deadline: float | None = None) -> pb.SubmitResponse: ...
    def submitting_group(self, uids: list[str], task: asyncio.Task[pb.SubmitGroupResponse]) -> None: ...
    async def claim(
        self, job: pb.JobScript, job_dir: Path, *, gang: str = "", deadline: float | None = None
    ) -> tuple[bool, JobRow]: ...
    async def take_over(self, rows: list[JobRow]) -> bool: ...
    async def rewrite_job_dir(self, job_dir: Path, job: pb.JobScript) -> None: ...
    async def submit_planned(self, submission: Callable[[], Awaitable[str]], *, created: bool) -> SubmitAction: ...
    async def give_up(self, uids: list[str]) -> None: ...
    async def fail_submission(self, row: JobRow, reason: str) -> None: ...
    async def track_submitted(self, rows: list[JobRow], job_id: str) -> None: ...


class SubmitsArrays(Protocol):
    """SubmitGroup of kind ARRAY (``engine.arrays.ArraySubmissions``, built on this module)."""

    async def submit_array(
        self, req: pb.SubmitGroupRequest, *, deadline: float | None = None
    ) -> pb.SubmitGroupResponse: ...


class PodGroupSubmissions:
    """SubmitGroup for one instance: a pod group run as one gang, its members through :class:`MemberSubmissions`."""

    def __init__(self, submissions: MemberSubmissions, arrays: SubmitsArrays | None = None) -> None:
        self._subs = submissions
        self.arrays = arrays
        """SubmitGroup of kind ARRAY: the second kind of group, each member its own job (``engine.arrays``)."""
        self.inflight: dict[str, asyncio.Task[pb.SubmitGroupResponse]] = {}
        """By group uid: concurrent identical SubmitGroups share one task (each member's uid is also in
        ``MemberSubmissions.submitting_group``, so a Cancel and recovery wait for it)."""

    async def submit_group(
        self, req: pb.SubmitGroupRequest, *, deadline: float | None = None
    ) -> pb.SubmitGroupResponse:
        """Idempotent by group uid and by member uid; shielded like Submit, and with its ``deadline`` (when the
        caller stops waiting) kept by every member's row. An array (``kind`` ARRAY) goes to ``engine.arrays``."""
        if req.kind == pb.GroupKind.ARRAY:
            if self.arrays is None:
                raise Refused("this submitter does not run arrays (SubmitGroup of kind GROUP_KIND_ARRAY)")
            return await self.arrays.submit_array(req, deadline=deadline)
        members = list(req.members)
        try:
            group = validate_group(members)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        for i, job in enumerate(members):
            try:
                self._subs.validate(job)
            except InvalidRequest as exc:
                raise InvalidRequest(f"members[{i}]: {exc}") from None
        subs = self._subs
        if not isinstance(subs.backend, RunsGangs):
            raise Refused(refusal(subs.backend.name))
        if subs.stopping:
            raise Unavailable("submitter is stopping")
        running = self.inflight.get(group)
        if running is not None:
            resp = await asyncio.shield(running)
            return await self._answer([m.pod.uid for m in members if m.pod is not None], resp.job_id)
        task = asyncio.ensure_future(self._submit_group(group, members, deadline))
        uids = [m.pod.uid for m in members if m.pod is not None]
        self.inflight[group] = task
        subs.submitting_group(uids, task)
        task.add_done_callback(lambda _t: self.inflight.pop(group, None))
        return await asyncio.shield(task)

    async def _answer(self, uids: Sequence[str], job_id: str) -> pb.SubmitGroupResponse:
        rows = await self._subs.registry().get_many(list(uids))
        statuses = [st for uid in uids if (row := rows.get(uid)) is not None and (st := row.job_status()) is not None]
        return pb.SubmitGroupResponse(job_id=job_id, created=False, statuses=statuses)

    async def _claim(self, job: pb.JobScript, group: str, deadline: float | None) -> tuple[bool, JobRow]:
        """One member's claim and job directory, exactly as a single pod's (``Submissions.claim``)."""
        subs = self._subs
        pod = job.pod if job.pod is not None else pb.PodRef()
        return await subs.claim(job, jobfiles.job_dir_for(subs.state_dir, pod.uid), gang=group, deadline=deadline)

    async def _submit_group(
        self, group: str, jobs: list[pb.JobScript], deadline: float | None
    ) -> pb.SubmitGroupResponse:
        subs = self._subs
        reg = subs.registry()
        claims = await asyncio.gather(*(self._claim(job, group, deadline) for job in jobs))
        created = [c for c, _ in claims]
        rows = [r for _, r in claims]
        uids = [r.uid for r in rows]
        for i, row in enumerate(rows):
            if row.gang != group:
                what = f"in pod group {row.gang}" if row.gang else "as a single pod"
                raise Refused(f"members[{i}].pod.uid {row.uid} was already submitted {what}")
        if not await subs.take_over(rows):  # another instance, alive, is submitting them
            return await self._answer(uids, known_job_id([_member_row(r) for r in rows]))
        plan = plan_group([_member_row(r) for r in rows], created)
        if plan is GroupPlan.ANSWER:
            return await self._answer(uids, known_job_id([_member_row(r) for r in rows]))
        if plan is GroupPlan.RECORD:
            await record_gang(subs, rows, known_job_id([_member_row(r) for r in rows]))
            return await self._answer(uids, rows[0].job_id)
        backend = subs.backend
        assert isinstance(backend, RunsGangs)
        spec = gang_spec(subs.state_dir, rows, jobs)
        if plan is GroupPlan.FIND_THEN_SUBMIT:
            if any(r.phase is not Phase.SUBMITTING for r in rows):
                await self._fail(rows, "a member of the pod group was cancelled before the group started")
            await reg.set_deadline(uids, deadline)  # a caller waits for it again (an error answer ended a wait)
            try:
                found = await backend.find_gang(spec)
            except BackendError as exc:
                raise Unavailable(f"{backend.name} is unavailable: {exc}") from None
            if found.job_id is not None:
                await record_gang(subs, rows, found.job_id)
                return await self._answer(uids, found.job_id)
            for i, row in enumerate(rows):  # resuming: a member's directory may be missing or partial
                if not created[i]:
                    await subs.rewrite_job_dir(row.job_dir, jobs[i])
        job_id = await submit_gang(subs, spec, rows, created=all(created), deadline=deadline)
        if all(created):
            return pb.SubmitGroupResponse(job_id=job_id, created=True)  # pending; the caller knows the containers
        return await self._answer(uids, job_id)

    async def _fail(self, rows: Sequence[JobRow], reason: str) -> None:
        for row in rows:
            if row.phase is Phase.SUBMITTING:
                await self._subs.fail_submission(row, reason)
        raise Refused(reason)


async def submit_gang(
    subs: MemberSubmissions, spec: GangSpec, rows: Sequence[JobRow], *, created: bool, deadline: float | None
) -> str:
    """The gang's directory, then ONE backend submission (unless the caller's ``deadline`` passed), then every
    member recorded and tracked."""
    backend = subs.backend
    assert isinstance(backend, RunsGangs)
    try:
        await asyncio.to_thread(_make_gang_dir, spec.job_dir)
    except OSError as exc:
        raise Unavailable(f"cannot write the pod group's directory: {exc}") from None
    subs.on_step("job_dir")
    action: SubmitAction
    if past_deadline(deadline, subs.clock.time()):
        action = FailPod(gave_up(backend.name), gave_up(backend.name))
    else:
        action = await subs.submit_planned(lambda: backend.submit_gang(spec), created=created)
    if isinstance(action, RetryLater | CannotRun):
        await subs.give_up([r.uid for r in rows])
        raise Unavailable(action.message) if isinstance(action, RetryLater) else CannotSubmit(action.message)
    if isinstance(action, FailPod):
        for row in rows:
            await subs.fail_submission(row, action.reason)
        raise Refused(action.message)
    await record_gang(subs, rows, action.job_id)
    return action.job_id


async def record_gang(subs: MemberSubmissions, rows: Sequence[JobRow], job_id: str) -> None:
    """Every member waiting for its id gets the gang's; every live member is tracked (SUBMITTING → ACTIVE)."""
    reg = subs.registry()
    waiting = [r for r in rows if r.phase is Phase.SUBMITTING]
    await asyncio.gather(*(reg.mark_submitted(r.uid, job_id) for r in waiting))
    subs.on_step("marked")
    await subs.track_submitted(list(rows), job_id)


async def recover_gangs(
    rows: Sequence[JobRow],
    *,
    state_dir: Path,
    backend: Backend,
    registry: Registry,
    poller: Poller,
    warned: set[str],
    now: float,
    drop: Callable[[Sequence[JobRow]], Awaitable[None]],
) -> None:
    """After a restart: the live rows of gangs (never submitted alone) → track, find, submit once, or wait; or
    ``drop`` the members of a gang the backend never got whose caller's deadline has passed."""
    by_gang: dict[str, list[JobRow]] = {}
    for row in rows:
        by_gang.setdefault(row.gang, []).append(row)
    for group, live in by_gang.items():
        every = {r.uid: r for r in await registry.gang_rows(group)}
        specs = [(r, r.job_spec()) for r in every.values()]
        members = [r for r, _ in sorted(specs, key=lambda rs: rs[1].gang.rank if rs[1].gang is not None else 0)]
        first = specs[0][1].gang
        size = first.size if first is not None else len(members)
        stored = await asyncio.to_thread(_scripts_stored, members)
        plan = plan_gang_recovery([_member_row(r) for r in members], size=size, scripts_stored=stored)
        job_id = plan.job_id
        if not job_id and isinstance(backend, RunsGangs):
            spec = gang_spec(state_dir, members)
            try:
                found: Reconciled = await backend.find_gang(spec)
                waiting = [r for r in live if r.phase is Phase.SUBMITTING]
                if found.job_id is None and waiting and all(past_deadline(r.deadline, now) for r in waiting):
                    await drop(waiting)
                    continue
                if found.job_id is None and plan.may_submit:
                    found = Reconciled(await backend.submit_gang(spec))
            except BackendError as exc:
                log.warning("recovering pod group %s failed: %s", group, exc)
                continue
            job_id = found.job_id or ""
        if not job_id:
            if group not in warned:
                warned.add(group)
                log.warning("pod group %s was interrupted before every member was stored; waiting for a retry", group)
            continue
        waiting = [r for r in live if r.phase is Phase.SUBMITTING]
        await asyncio.gather(*(registry.mark_submitted(r.uid, job_id) for r in waiting))
        for row in live:
            row.job_id = job_id
            row.phase = Phase.ACTIVE
            poller.track(row)
