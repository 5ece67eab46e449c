"""``RunsArrays`` for the ``htcondor`` backend: the pods of one Job as one ``condor_submit`` of ``queue N``.

A mixin of ``HTCondorBackend`` (its module is at its size limit): it uses the backend's own command runner,
queries and failure handling, declared in :class:`_Condor`. The description is ``array.array_description``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from interlink_nats.submitters.backends.htcondor import array as ha
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.proc import Completed
from interlink_nats.submitters.core import backend as base

ARRAY_SUBMIT_FILE = "condor-array.sub"


class _Settings(Protocol):
    @property
    def condor_submit(self) -> str: ...
    @property
    def condor_q(self) -> str: ...


class _Condor(Protocol):
    """What the mixin uses of ``HTCondorBackend``."""

    pool: str
    _site: hs.SubmitSite

    @property
    def settings(self) -> _Settings: ...
    @property
    def spool(self) -> bool: ...
    def _target(self) -> list[str]: ...
    def _failure(self, command: hp.Command, done: Completed) -> Exception: ...
    async def _exec(self, command: hp.Command, argv: list[str], *, cwd: str | None = None) -> Completed: ...
    async def _remove_failed_submission(self, done: Completed, job_dir: Path) -> None: ...
    async def _query(self, command: hp.Command, tool: str, constraint: str, *extra: str) -> list[dict[str, object]]: ...
    async def _history(self, constraints: list[str]) -> dict[str, hp.CondorJob]: ...


def _write_array(array: base.ArraySpec, text: str) -> Path:
    """``tasks/<p>`` linked to member p's directory, and the description, written atomically (a retry rewrites the
    same)."""
    tasks = array.job_dir / ha.TASKS_DIR
    tasks.mkdir(mode=0o700, parents=True, exist_ok=True)
    for p, member in enumerate(array.members):
        link = tasks / str(p)
        if not link.is_symlink() or link.readlink() != member.job_dir:
            tmp = tasks / f".{p}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(member.job_dir)
            tmp.replace(link)
    path = array.job_dir / ARRAY_SUBMIT_FILE
    tmp = path.with_name(f".{ARRAY_SUBMIT_FILE}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


class SubmitsArrays:
    """``RunsArrays``: one cluster of N procs, proc p member p (``array``); each proc is then polled, cancelled
    (``condor_rm <cluster>.<p>``) and found as an ordinary job."""

    async def submit_array(self: _Condor, array: base.ArraySpec) -> tuple[str, tuple[str, ...]]:
        try:
            text = ha.array_description(array, self._site)
        except hs.SubmitCommandError as exc:
            raise base.SubmitRejected(str(exc)) from exc
        path = await asyncio.to_thread(_write_array, array, text)
        spool = ["-spool"] if self.spool else []
        argv = [self.settings.condor_submit, "-terse", *spool, *self._target(), str(path)]
        done = await self._exec(hp.Command.SUBMIT, argv, cwd=str(array.job_dir))
        if done.returncode != 0:
            await self._remove_failed_submission(done, array.job_dir)
            raise self._failure(hp.Command.SUBMIT, done)
        try:
            cluster = hp.parse_submit_id(done.stdout).split(".", 1)[0]
        except ValueError as exc:
            raise base.BackendUnavailable(str(exc)) from None
        return cluster, ha.member_job_ids(cluster, len(array.members))

    async def find_array(self: _Condor, array: base.ArraySpec) -> base.Reconciled:
        """The cluster whose procs carry the array's uid: the queue, then the history."""
        constraint = ha.array_constraint(self.pool, array.array_uid)
        ads = await self._query(hp.Command.QUEUE, self.settings.condor_q, constraint, "-allusers")
        clusters = {str(ad.get("ClusterId")) for ad in ads}
        if not clusters:
            clusters = {job.cluster for job in (await self._history([constraint])).values()}
        return base.Reconciled(max(clusters, key=int) if clusters else None)

    def member_job_ids(self, array: base.ArraySpec, array_job_id: str) -> tuple[str, ...]:
        return ha.member_job_ids(array_job_id, len(array.members))
