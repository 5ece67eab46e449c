"""Crash recovery and adoption: after a restart (or a replica's death), track every live job again.

The runtime gathers the inputs (live registry rows, what the backend's ``reconcile`` finds,
whether a script is stored) and executes :func:`lifecycle.plan_recovery`'s actions, so a job
whose submission was interrupted is neither lost nor submitted twice, nor submitted at all once its
caller's deadline has passed (the gateway has given up on it: ``Drop``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import BackendError, JobHandle, ReadsScriptOptions
from interlink_nats.submitters.core.errors import InvalidRequest
from interlink_nats.submitters.core.lifecycle import (
    AwaitRetry,
    Drop,
    Phase,
    RecoveryInput,
    Resubmit,
    Track,
    after_resubmit,
    gave_up,
    owners_to_adopt,
    past_deadline,
    plan_recovery,
)
from interlink_nats.submitters.core.status import submit_failed_status
from interlink_nats.submitters.engine.arrays import array_of, recover_arrays
from interlink_nats.submitters.engine.gangs import recover_gangs
from interlink_nats.submitters.engine.polling import meta_from_row
from interlink_nats.submitters.engine.submission import Submissions, check_script_options
from interlink_nats.submitters.state.schema import JobRow

log = logging.getLogger(__name__)


class Recovery:
    """Adoption and crash recovery for one instance: it resubmits, records and tracks with the registry, backend
    and poller of :class:`Submissions`, as Submit does."""

    def __init__(self, submissions: Submissions) -> None:
        self._subs = submissions
        self._waiting_retry: set[str] = set()
        """Jobs interrupted before their script was stored, already logged once."""

    async def adopt_dead_owners(self) -> int:
        """Take over the jobs of every replica whose instance lock is gone; returns how many."""
        reg = self._subs.registry()
        owners = await reg.owners()
        others = [o for o in owners if o != self._subs.lock.instance_id]
        dead = {o for o in others if await asyncio.to_thread(self._subs.lock.owner_is_dead, o)}
        adopted = 0
        for owner in owners_to_adopt(owners, self._subs.lock.instance_id, dead):
            n = await reg.adopt(owner, self._subs.lock.instance_id)
            if n:
                log.info("adopted %d jobs of stopped instance %s", n, owner)
            adopted += n
        return adopted

    async def recover(self, busy: set[str] | frozenset[str] = frozenset()) -> None:
        """Track every live job this instance owns that it is not tracking (or submitting, ``busy``) yet."""
        reg = self._subs.registry()
        skip = self._subs.poller.tracked.keys() | busy
        rows = {r.uid: r for r in await reg.live(self._subs.lock.instance_id) if r.uid not in skip}
        await self._subs.outbox.restore(reg)
        now = self._subs.clock.time()
        members = [r for r in rows.values() if r.gang]
        if members:  # a gang's members are never reconciled or resubmitted alone
            for row in members:
                del rows[row.uid]
            await recover_gangs(
                members,
                state_dir=self._subs.state_dir,
                backend=self._subs.backend,
                registry=reg,
                poller=self._subs.poller,
                warned=self._waiting_retry,
                now=now,
                drop=self._drop,
            )
        arrayed = [r for r in rows.values() if r.phase is Phase.SUBMITTING and not r.job_id and array_of(r) is not None]
        if arrayed:  # an array's members are found (or submitted) as their array, never alone
            for row in arrayed:
                del rows[row.uid]
            # claimed by a SubmitGroup that began after ``busy`` was taken: that call submits them, not recovery
            arrayed = [r for r in arrayed if r.uid not in self._subs.group_inflight]
            await recover_arrays(self._subs, arrayed, warned=self._waiting_retry)
        if not rows:
            return
        found = await self._subs.backend.reconcile([JobHandle(r.uid, r.job_dir, r.job_id) for r in rows.values()])
        inputs: dict[str, RecoveryInput] = {}
        for row in rows.values():
            outcome = found.get(row.uid)
            found_id = outcome.job_id if outcome is not None else None
            stored = found_id is not None or await asyncio.to_thread((row.job_dir / layout.SCRIPT_NAME).exists)
            expired = row.phase is Phase.SUBMITTING and past_deadline(row.deadline, now)
            inputs[row.uid] = RecoveryInput(row.uid, row.phase, row.job_id, found_id, stored, expired)
        for action in plan_recovery(inputs.values()):
            row = rows[action.uid]
            if isinstance(action, Drop):
                await self._drop([row])
                continue
            if isinstance(action, AwaitRetry):
                if row.uid not in self._waiting_retry:
                    self._waiting_retry.add(row.uid)
                    log.warning(
                        "job %s was interrupted before its script was stored; waiting for a retry",
                        row.uid,
                        extra={"pod_uid": row.uid, "namespace": row.namespace},
                    )
                continue
            track: Track
            if isinstance(action, Resubmit):
                refusal = await self._script_refusal(row)
                if refusal is not None:
                    await self._fail(row, refusal)
                    continue
                try:
                    job_id = await self._subs.backend.submit(row.backend_spec())
                except BackendError as exc:
                    log.warning(
                        "resubmitting interrupted job %s failed: %s",
                        row.uid,
                        exc,
                        extra={"pod_uid": row.uid, "namespace": row.namespace},
                    )
                    continue
                track = after_resubmit(inputs[row.uid], job_id)
            else:
                track = action
            if track.record:
                await reg.mark_submitted(row.uid, track.job_id)
                row.job_id = track.job_id
            self._subs.poller.track(row)
        log.info("tracking %d jobs after recovery", len(self._subs.poller.tracked))

    async def _script_refusal(self, row: JobRow) -> str | None:
        """Why the door would refuse the stored script now (the backend's batch options in it), if it would. Checked
        at its door, on the request's text; again here, from the file: an earlier version may have claimed it,
        whose door left that check to the backend's submit. Read as bytes and decoded, as the door got the text (no
        newline translation: sbatch splits lines at ``\\n`` alone)."""
        if not isinstance(self._subs.backend, ReadsScriptOptions):
            return None  # nothing to check: no file read
        try:
            raw = await asyncio.to_thread((row.job_dir / layout.SCRIPT_NAME).read_bytes)
        except OSError:
            return None  # the backend's own submit says what is missing
        try:
            check_script_options(raw.decode(errors="replace"), self._subs.backend)
        except InvalidRequest as exc:
            return str(exc)
        return None

    async def _fail(self, row: JobRow, message: str) -> None:
        """Never submit it: its pod fails, saying why."""
        subs = self._subs
        meta = meta_from_row(row, subs.pool, subs.backend.name)
        await subs.record_final(row, submit_failed_status(meta, message, now=subs.clock.time()))
        log.warning(
            "not submitting job %s: %s", row.uid, message, extra={"pod_uid": row.uid, "namespace": row.namespace}
        )

    async def _drop(self, rows: Sequence[JobRow]) -> None:
        """Never submit these: their callers stopped waiting before the backend got them (``lifecycle.Drop``)."""
        for row in rows:
            await self._fail(row, gave_up(self._subs.backend.name))
