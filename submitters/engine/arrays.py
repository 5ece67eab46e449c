"""SubmitGroup of kind ARRAY and an array's recovery: many independent pods handed to the backend ONCE.

Each member is an ordinary single pod at the submitter (its own registry row and job directory, its own job id,
polled, logged and cancelled alone); only the submission is one. Order of the durable steps: claim every member
(row + job directory, exactly once by pod uid) → the array's directory with its member list (``ARRAY_MEMBERS``,
the pod uids in task order) → ``find_array`` when resuming, else ``submit_array`` (named by the array uid) →
every member marked submitted with its own job id → tracked. A member whose pod was deleted before the ids were
recorded has its task cancelled once the backend has it. A backend without ``RunsArrays`` gets every member as a
single ``Submit`` (the array field dropped): the single pod's path, idempotency and recovery unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.arrays import (
    ARRAY_DIR,
    ARRAY_MEMBERS,
    MemberState,
    member_ids,
    settle,
    validate_array,
    waiting,
)
from interlink_nats.submitters.core.backend import ArraySpec, BackendError, JobHandle, RunsArrays
from interlink_nats.submitters.core.errors import CannotSubmit, InvalidRequest, Refused, Unavailable
from interlink_nats.submitters.core.lifecycle import (
    CannotRun,
    FailPod,
    Phase,
    RetryLater,
    SubmitAction,
    gave_up,
    past_deadline,
)
from interlink_nats.submitters.engine.gangs import MemberSubmissions
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.state.schema import JobRow

log = logging.getLogger(__name__)


def array_dir_for(state_dir: Path, array_uid: str) -> Path:
    """An array's own directory (``<state>/arrays/<uid>``), beside the members' job directories."""
    return state_dir.joinpath(ARRAY_DIR, jobfiles.validate_uid(array_uid))


def _write_members(array_dir: Path, uids: Sequence[str]) -> None:
    """The member list, written atomically before the backend sees the array: recovery reads it."""
    os.makedirs(array_dir, mode=0o700, exist_ok=True)
    tmp = array_dir / f".{ARRAY_MEMBERS}.tmp"
    tmp.write_text("".join(f"{u}\n" for u in uids))
    os.replace(tmp, array_dir / ARRAY_MEMBERS)


def read_members(array_dir: Path) -> list[str] | None:
    """The array's member list; None when it was never written (the backend never got the array)."""
    try:
        return (array_dir / ARRAY_MEMBERS).read_text().split()
    except OSError:
        return None


def _scripts_stored(rows: Sequence[JobRow]) -> bool:
    return all((r.job_dir / layout.SCRIPT_NAME).exists() for r in rows)


def _state(rows: Sequence[JobRow]) -> list[MemberState]:
    return [MemberState(r.uid, r.phase, r.job_id) for r in rows]


def array_of(row: JobRow) -> pb.ArrayMember | None:
    """The array a claimed row was sent in (its stored JobScript says), None for a single pod."""
    return row.job_spec().array


class ArraySubmissions:
    """SubmitGroup of kind ARRAY for one instance, its members through :class:`MemberSubmissions`."""

    def __init__(self, submissions: MemberSubmissions, *, throttle: int = 0) -> None:
        self._subs = submissions
        self.throttle = throttle
        self.inflight: dict[str, asyncio.Task[pb.SubmitGroupResponse]] = {}

    async def submit_array(
        self, req: pb.SubmitGroupRequest, *, deadline: float | None = None
    ) -> pb.SubmitGroupResponse:
        """Idempotent by array uid and by member uid; shielded like Submit."""
        members = list(req.members)
        try:
            array_uid = validate_array(members)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        for i, job in enumerate(members):
            try:
                self._subs.validate(job)
            except InvalidRequest as exc:
                raise InvalidRequest(f"members[{i}]: {exc}") from None
        if self._subs.stopping:
            raise Unavailable("submitter is stopping")
        if not isinstance(self._subs.backend, RunsArrays):
            return await self._singly(members, deadline)
        uids = [m.pod.uid for m in members if m.pod is not None]
        ours = self.inflight.get(array_uid)
        for other in {t for u in uids if (t := self._subs.group_inflight.get(u)) is not None and t is not ours}:
            with contextlib.suppress(Exception):  # recovery submitting this array: it submits, this answers
                await asyncio.shield(other)
        running = self.inflight.get(array_uid)
        if running is not None:
            await asyncio.shield(running)
            return await self._answer(uids)
        task = asyncio.ensure_future(self._submit_array(array_uid, members, deadline))
        self.inflight[array_uid] = task
        self._subs.submitting_group(uids, task)
        task.add_done_callback(lambda _t: self.inflight.pop(array_uid, None))
        return await asyncio.shield(task)

    async def _singly(self, members: list[pb.JobScript], deadline: float | None) -> pb.SubmitGroupResponse:
        """A backend without arrays: each member a single Submit, as if it had come alone."""
        alone = []
        for job in members:
            single = copy.copy(job)
            single.array = None
            alone.append(single)
        replies = await asyncio.gather(*(self._subs.submit(job, deadline=deadline) for job in alone))
        created = all(r.created for r in replies)
        return pb.SubmitGroupResponse(
            job_id=replies[0].job_id,
            created=created,
            statuses=[] if created else [r.status or pb.JobStatus() for r in replies],
            member_job_ids=[r.job_id for r in replies],
        )

    async def _answer(
        self, uids: Sequence[str], *, created: bool = False, known: dict[str, str] | None = None
    ) -> pb.SubmitGroupResponse:
        """Every member's id (``known``: those this call recorded, as recorded) and, unless new, status."""
        rows = await self._subs.registry().get_many(list(uids))
        known = known or {}
        ids = [known.get(u) or (rows[u].job_id if u in rows else "") for u in uids]
        statuses = [] if created else [rows[u].job_status() or pb.JobStatus() for u in uids if u in rows]
        return pb.SubmitGroupResponse(
            job_id=next((i for i in ids if i), ""), created=created, statuses=statuses, member_job_ids=ids
        )

    async def _submit_array(
        self, array_uid: str, jobs: list[pb.JobScript], deadline: float | None
    ) -> pb.SubmitGroupResponse:
        subs = self._subs
        claims = await asyncio.gather(
            *(
                subs.claim(job, jobfiles.job_dir_for(subs.state_dir, job.pod.uid if job.pod else ""), deadline=deadline)
                for job in jobs
            )
        )
        created = [c for c, _ in claims]
        rows = [r for _, r in claims]
        uids = [r.uid for r in rows]
        for i, (row, was_created) in enumerate(zip(rows, created, strict=True)):
            theirs = None if was_created else array_of(row)
            if row.gang or (not was_created and (theirs is None or theirs.array_uid != array_uid)):
                what = f"in pod group {row.gang}" if row.gang else "in another array or as a single pod"
                raise Refused(f"members[{i}].pod.uid {row.uid} was already submitted {what}")
        if not await subs.take_over(rows):  # another instance, alive, is submitting them
            return await self._answer(uids)
        todo = waiting(_state(rows))
        if not todo:
            return await self._answer(uids)
        backend = subs.backend
        assert isinstance(backend, RunsArrays)
        array_dir = array_dir_for(subs.state_dir, array_uid)
        by_uid = {r.uid: (r, j) for r, j in zip(rows, jobs, strict=True)}
        if not all(created):  # resuming: the backend may have the array already (as its member list says)
            await subs.registry().set_deadline([uids[i] for i in todo], deadline)
            prior = await asyncio.to_thread(read_members, array_dir)
            if prior is not None and all(u in by_uid for u in prior):
                sent = [by_uid[u] for u in prior]
                spec = self._spec(array_uid, array_dir, sent)
                try:
                    found = await backend.find_array(spec)
                except BackendError as exc:
                    raise Unavailable(f"{backend.name} is unavailable: {exc}") from None
                if found.job_id is not None:
                    ids = backend.member_job_ids(spec, found.job_id)
                    await record_array(subs, [r for r, _ in sent], ids)
                    return await self._answer(uids, known=dict(zip(prior, ids, strict=False)))
            for i in todo:
                if not created[i]:
                    await subs.rewrite_job_dir(rows[i].job_dir, jobs[i])
        spec = self._spec(array_uid, array_dir, [(rows[i], jobs[i]) for i in todo])
        ids = await submit_array(subs, spec, [rows[i] for i in todo], created=all(created), deadline=deadline)
        known = {rows[i].uid: job_id for i, job_id in zip(todo, ids, strict=True)}
        return await self._answer(uids, created=all(created), known=known)

    def _spec(self, array_uid: str, array_dir: Path, members: Sequence[tuple[JobRow, pb.JobScript]]) -> ArraySpec:
        """The backend's view of the members to submit (in task order; a resumed array's: those still wanted)."""
        first = members[0][1].array if members else None
        return ArraySpec(
            array_uid=array_uid,
            members=tuple(row.backend_spec(job) for row, job in members),
            job_dir=array_dir,
            throttle=self.throttle,
            name=first.job_name if first is not None else "",
            namespace=members[0][0].namespace if members else "",
        )


async def submit_array(
    subs: MemberSubmissions, spec: ArraySpec, rows: Sequence[JobRow], *, created: bool, deadline: float | None
) -> tuple[str, ...]:
    """The array's member list, then ONE backend submission (unless the caller's ``deadline`` passed), then every
    member recorded with its own id and tracked."""
    backend = subs.backend
    assert isinstance(backend, RunsArrays)
    try:
        await asyncio.to_thread(_write_members, spec.job_dir, [r.uid for r in rows])
    except OSError as exc:
        raise Unavailable(f"cannot write the array's directory: {exc}") from None
    subs.on_step("job_dir")
    answered: list[tuple[str, ...]] = []

    async def once() -> str:
        array_id, ids = await backend.submit_array(spec)
        answered.append(ids)
        return array_id

    action: SubmitAction
    if past_deadline(deadline, subs.clock.time()):
        action = FailPod(gave_up(backend.name), gave_up(backend.name))
    else:
        action = await subs.submit_planned(once, created=created)
    live = [r for r in rows if r.phase is Phase.SUBMITTING]
    if isinstance(action, RetryLater | CannotRun):
        await subs.give_up([r.uid for r in live])
        raise Unavailable(action.message) if isinstance(action, RetryLater) else CannotSubmit(action.message)
    if isinstance(action, FailPod):
        for row in live:
            await subs.fail_submission(row, action.reason)
        raise Refused(action.message)
    try:
        ids = member_ids(answered[0] if answered else (), len(rows))
    except ValueError as exc:
        raise Unavailable(f"{backend.name}: {exc}") from None
    await record_array(subs, rows, ids)
    return ids


async def record_array(subs: MemberSubmissions, rows: Sequence[JobRow], ids: Sequence[str]) -> None:
    """Every member waiting for its id gets its own and is tracked; the task of every member deleted meanwhile is
    cancelled (its pod is gone: its task must not run)."""
    reg = subs.registry()
    state = _state(rows)
    todo = waiting(state)
    recorded = [await reg.mark_submitted(rows[i].uid, ids[i]) for i in todo]  # not when tombstoned meanwhile
    subs.on_step("marked")
    track, cancel = settle(state, todo, recorded)
    for i in track:
        await subs.track_submitted([rows[i]], ids[i])
    for i in cancel:
        try:
            await subs.backend.cancel(JobHandle(rows[i].uid, rows[i].job_dir, ids[i]))
            log.info("cancelled task %s of pod %s, deleted while its array was submitted", ids[i], rows[i].uid)
        except BackendError as exc:
            log.warning("cannot cancel task %s of deleted pod %s: %s", ids[i], rows[i].uid, exc)


async def recover_arrays(subs: MemberSubmissions, rows: Sequence[JobRow], *, warned: set[str]) -> None:
    """After a restart: members claimed in an array and never recorded as submitted, by array: found again
    (``find_array``: recorded, never submitted twice), else submitted once when every member's script is
    stored, else left for the gateway's retry of the same SubmitGroup (or failed once its deadline passed)."""
    by_array: dict[str, list[JobRow]] = {}
    for row in rows:
        array = array_of(row)
        by_array.setdefault(array.array_uid if array else "", []).append(row)
    for array_uid, live in by_array.items():
        if any(r.uid in subs.group_inflight for r in live):  # a SubmitGroup (the gateway's retry) submits it
            continue
        # In flight as a SubmitGroup is: a Cancel of a member (and a retry of the array) waits for it to end, so
        # it finds the member's task recorded and stops it, instead of finding it still submitting.
        task = asyncio.ensure_future(_recover_array(subs, array_uid, live, warned))
        subs.submitting_group([r.uid for r in live], task)
        await task


async def _recover_array(
    subs: MemberSubmissions, array_uid: str, live: list[JobRow], warned: set[str]
) -> pb.SubmitGroupResponse:
    """One array of :func:`recover_arrays`; what it answers is not read."""
    backend = subs.backend
    reg = subs.registry()
    now = subs.clock.time()
    done = pb.SubmitGroupResponse()
    array_dir = array_dir_for(subs.state_dir, array_uid)
    uids = await asyncio.to_thread(read_members, array_dir)
    if uids is None or not isinstance(backend, RunsArrays):  # never handed to the backend
        if all(past_deadline(r.deadline, now) for r in live):
            for row in live:
                await subs.fail_submission(row, gave_up(backend.name))
        elif array_uid not in warned:
            warned.add(array_uid)
            log.warning("array %s was interrupted before it was submitted; waiting for a retry", array_uid)
        return done
    every = await reg.get_many(uids)
    members = [every[u] for u in uids if u in every]
    if len(members) != len(uids):
        log.warning("array %s: %d of its members are no longer known", array_uid, len(uids) - len(members))
        return done
    spec = ArraySpec(
        array_uid=array_uid,
        members=tuple(r.backend_spec() for r in members),
        job_dir=array_dir,
        namespace=members[0].namespace,
    )
    try:
        found = await backend.find_array(spec)
        if found.job_id is not None:
            await record_array(subs, members, member_ids(backend.member_job_ids(spec, found.job_id), len(members)))
            return done
        members = [members[i] for i in waiting(_state(members))]  # never submitted: only those still wanted
        if not members or not await asyncio.to_thread(_scripts_stored, members):
            return done
        spec = ArraySpec(array_uid, tuple(r.backend_spec() for r in members), array_dir, namespace=spec.namespace)
        await asyncio.to_thread(_write_members, array_dir, [r.uid for r in members])
        array_id, ids = await backend.submit_array(spec)
        log.info("array %s: submitted after a restart as %s", array_uid, array_id)
        await record_array(subs, members, member_ids(ids, len(members)))
    except (BackendError, OSError, ValueError) as exc:
        log.warning("recovering array %s failed: %s", array_uid, exc)
    return done
