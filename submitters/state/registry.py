"""The durable job registry: one SQLite file (WAL) per pool on the site, shared by its replicas.

Why SQLite: a submitter must survive its own crash without losing or re-running a job, and
replicas on one host must agree on who owns what. One WAL database gives atomic
"insert if absent" (Submit idempotency by pod UID), durable intent records written *before*
the backend is called, and concurrent readers for status answers from any replica.

Lifecycle of a row (``phase``): see :mod:`submitters.core.lifecycle` (the phases and the transition
table); the SQL guards here enforce that table (e.g. a ``deleted`` tombstone never changes).

Reads and writes use different connections. Reads go through aiosqlite (one connection on its
own thread) and see committed data only. Writes go through one :class:`BatchRunner` that owns a
plain ``sqlite3`` connection on its own thread: writes queued while a commit runs are applied
together in the next transaction (group commit). So 64 concurrent Submits cost a few commits and
thread hops instead of 128, and writes never interleave inside another caller's transaction. A
write made while that thread is idle commits on the event loop instead (``inline``: one commit
without the hop's two wake-ups), unless another process holds the lock. Either way a write
returns only after its transaction is committed (durable against a process crash: WAL with
``synchronous=NORMAL``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeVar, cast

import aiosqlite
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.submitters.core.lifecycle import LIVE_PHASES, Phase
from interlink_nats.submitters.state.batching import BatchRunner
from interlink_nats.submitters.state.inline import INLINE_CHECKPOINT_EVERY, InlineWriter, is_busy
from interlink_nats.submitters.state.schema import (
    COLUMNS,
    ENDED_UNPUBLISHED,
    JobRow,
    RegistryError,
    StatusUpdate,
    migrate,
    row_from,
)

log = logging.getLogger("interlink_nats.submitters.state.registry")

_T = TypeVar("_T")

_Op = Callable[[sqlite3.Connection], object]
"""One write: runs inside the batch's transaction on the writer thread, returns its result."""


_LIVE_OF_OWNER = "owner = ? AND phase IN (?, ?)"
"""An owner's unfinished jobs; its parameters: the owner, then ``LIVE_PHASES``."""


@dataclass(slots=True)
class _AfterCommit:
    """An op's result plus work to run on the writer thread once that op's transaction is committed.

    Why: a Submit's claim and its job directory used to be two thread hops; the directory is now
    written on the writer thread right after the claim's commit, in the same hop. ``error`` is what
    ``then`` raised (any ``BaseException``, e.g. a test's simulated crash), handed to the caller.
    """

    result: object
    then: Callable[[], object]
    error: BaseException | None = None

    def run(self) -> _AfterCommit:
        try:
            self.then()
        except BaseException as exc:  # delivered to the caller on the event loop, like a future's exception
            self.error = exc
        return self


def _ignore_result(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: a checkpoint that failed is retried by the next one


@lru_cache(maxsize=256)
def _names_json(names: tuple[str, ...]) -> str:
    """A container-name list as its column stores it; every claim of a pod shape repeats the same one."""
    return json.dumps(list(names))


_INSERT = f"INSERT OR IGNORE INTO jobs ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_SELECT_ONE = f"SELECT {COLUMNS} FROM jobs WHERE uid = ?"


class _Writer:
    """The writer thread's side: one sqlite3 connection, one transaction per batch of writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    def open(self) -> None:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash (kill -9); only power loss may drop the last commits.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        try:
            found, version = migrate(conn, self.path)
        except BaseException:
            conn.close()
            raise
        if found != version:
            log.info("registry %s migrated from schema version %d to %d", self.path, found, version)
        self.conn = conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def checkpoint(self) -> None:
        """Copy the WAL back into the database where no reader needs it (the inline connection never does)."""
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):  # busy: the next one, or the next write here, does it
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def apply(self, ops: Sequence[_Op]) -> list[object]:
        """Run ``ops`` in one transaction; if it fails, run each alone so one bad op fails alone."""
        try:
            return self._transaction(ops)
        except Exception as exc:
            if len(ops) == 1:
                return [exc]
        out: list[object] = []
        for op in ops:
            try:
                out.extend(self._transaction([op]))
            except Exception as exc:
                out.append(exc)
        return out

    def _transaction(self, ops: Sequence[_Op]) -> list[object]:
        conn = self.conn
        if conn is None:
            raise RegistryError("registry is closed")
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = [op(conn) for op in ops]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return [r.run() if isinstance(r, _AfterCommit) else r for r in out]


@dataclass(eq=False, repr=False, slots=True)
class Registry:
    """Async access to the registry: aiosqlite for reads, one group-committing writer thread for writes (:meth:`open`
    builds it)."""

    _db: aiosqlite.Connection
    path: Path
    _writer: _Writer
    _runner: BatchRunner[_Op, object]
    _clock: Clock = SYSTEM_CLOCK
    _inline: InlineWriter | None = None

    @classmethod
    async def open(cls, path: Path, *, clock: Clock = SYSTEM_CLOCK) -> Registry:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        writer = _Writer(path)
        runner: BatchRunner[_Op, object] = BatchRunner(writer.apply, name="registry-writer")
        try:
            await runner.call(writer.open)  # creates the file, WAL mode and the schema
            db = await aiosqlite.connect(path, timeout=30.0, isolation_level=None)
            try:
                await db.execute("PRAGMA busy_timeout=30000")
                inline = await asyncio.to_thread(InlineWriter, path)
            except BaseException:
                await db.close()
                raise
        except Exception as exc:
            await runner.close(writer.close)
            raise RegistryError(f"cannot open registry {path}: {exc}") from exc
        os.chmod(path, 0o600)
        return cls(db, path, writer, runner, clock, inline)

    async def close(self) -> None:
        inline, self._inline = self._inline, None
        try:
            if inline is not None:
                inline.conn.close()
            await self._runner.close(self._writer.close)
        finally:
            await self._db.close()

    @property
    def write_batches(self) -> int:
        """Transactions committed by the writer so far (each may hold many writes)."""
        return self._runner.batches

    async def _write(self, op: Callable[[sqlite3.Connection], _T], *, thread_only: bool = False) -> _T:
        """``op`` committed: on the loop when the writer thread is idle (:class:`InlineWriter`), else in the thread's
        next group commit. ``thread_only``: an op whose result runs work after the commit (``_AfterCommit``)."""
        inline = None if thread_only else self._inline
        if inline is not None and self._runner.idle:  # nothing queued that this write could overtake
            try:
                result = inline.transaction(op)
            except sqlite3.Error as exc:
                if not is_busy(exc):
                    raise RegistryError(f"registry write failed: {exc}") from exc
            else:
                if inline.commits % INLINE_CHECKPOINT_EVERY == 0:
                    self._queue_checkpoint()
                return cast(_T, result)
        try:
            return cast(_T, await self._runner.run(op))
        except RegistryError:
            raise
        except sqlite3.Error as exc:
            raise RegistryError(f"registry write failed: {exc}") from exc

    def _queue_checkpoint(self) -> None:
        """Queue a checkpoint on the writer thread now (not from a task: lone writes that follow one another on
        the loop never let one start), so the writes after it take the thread's turn until it has run."""
        with contextlib.suppress(RuntimeError):  # closed: the writer's close checkpoints
            self._runner.queue_call(self._writer.checkpoint).add_done_callback(_ignore_result)

    async def _fetch(self, sql: str, params: Sequence[object] = ()) -> list[JobRow]:
        async with self._db.execute(sql, params) as cur:
            return [row_from(r) for r in await cur.fetchall()]

    async def claim(
        self,
        *,
        uid: str,
        namespace: str,
        name: str,
        owner: str,
        job_dir: Path,
        init_containers: Sequence[str],
        containers: Sequence[str],
        spec: bytes,
        status: bytes,
        then: Callable[[], object] | None = None,
        gang: str = "",
        deadline: float | None = None,
    ) -> tuple[bool, JobRow]:
        """Record the intent to submit, atomically: (True, row) if this call created it, else (False, existing).

        Returns once the row is committed. Claims of concurrent Submits share one transaction.
        ``then`` runs on the writer thread right after the commit, only if this call created the row
        (a Submit writes its job directory there: one thread hop instead of two); whatever it raises
        is raised here, unwrapped, after the claim is durable. ``deadline``: when the caller stops waiting.
        """
        now = self._clock.time()
        init_names, names = tuple(init_containers), tuple(containers)
        values = (
            uid,
            namespace,
            name,
            Phase.SUBMITTING,
            "",
            owner,
            str(job_dir),
            _names_json(init_names),
            _names_json(names),
            spec,
            int(pb.JobState.PENDING),
            status,
            0,  # revision: the claim's pending status travels in the Submit reply, so events start at 1
            0,
            now,
            now,
            None,
            gang,
            deadline,
        )

        def op(conn: sqlite3.Connection) -> object:
            if conn.execute(_INSERT, values).rowcount == 1:
                return (True, None) if then is None else _AfterCommit((True, None), then)
            return False, conn.execute(_SELECT_ONE, (uid,)).fetchone()

        try:
            result = await self._write(op, thread_only=then is not None)
        except Exception as exc:
            raise RegistryError(f"cannot record job {uid}: {exc}") from exc
        if isinstance(result, _AfterCommit):
            if result.error is not None:
                raise result.error
            result = result.result
        created, existing = cast("tuple[bool, tuple[object, ...] | None]", result)
        if created:  # the row as stored, built from what we have (not re-read and re-parsed)
            return True, JobRow(
                uid=uid,
                namespace=namespace,
                name=name,
                phase=Phase.SUBMITTING,
                job_id="",
                owner=owner,
                job_dir=job_dir,
                init_containers=init_names,
                containers=names,
                spec=spec,
                state=int(pb.JobState.PENDING),
                status=status,
                revision=0,
                published=0,
                created_at=now,
                updated_at=now,
                finished_at=None,
                gang=gang,
                deadline=deadline,
            )
        assert existing is not None
        return False, row_from(existing)

    async def get(self, uid: str) -> JobRow | None:
        rows = await self._fetch(_SELECT_ONE, (uid,))
        return rows[0] if rows else None

    async def gang_rows(self, gang: str) -> list[JobRow]:
        """Every row of one gang (its members, whatever their phase), for a cancel and a gang's recovery."""
        return await self._fetch(f"SELECT {COLUMNS} FROM jobs WHERE gang = ? AND gang != ''", (gang,))

    async def get_many(self, uids: Sequence[str]) -> dict[str, JobRow]:
        out: dict[str, JobRow] = {}
        for i in range(0, len(uids), 500):
            chunk = list(uids[i : i + 500])
            marks = ",".join("?" * len(chunk))
            for row in await self._fetch(f"SELECT {COLUMNS} FROM jobs WHERE uid IN ({marks})", chunk):
                out[row.uid] = row
        return out

    async def mark_submitted(self, uid: str, job_id: str) -> bool:
        """The job's id, and the job active; False when the row was no longer submitting (cancelled meanwhile)."""
        params = (Phase.ACTIVE, job_id, self._clock.time(), uid, Phase.SUBMITTING)
        return (
            await self._write(
                lambda conn: (
                    conn.execute(
                        "UPDATE jobs SET phase = ?, job_id = ?, updated_at = ? WHERE uid = ? AND phase = ?", params
                    ).rowcount
                )
            )
            > 0
        )

    async def set_deadline(self, uids: Sequence[str], deadline: float | None) -> None:
        """When the callers of these submissions stop waiting (a new request's deadline; the time of an error
        answer, after which nobody waits). Only a submission still ``submitting`` keeps one."""
        params = [(deadline, uid, Phase.SUBMITTING) for uid in uids]
        await self._write(
            lambda conn: conn.executemany("UPDATE jobs SET deadline = ? WHERE uid = ? AND phase = ?", params).rowcount
        )

    async def save_statuses(self, updates: Iterable[StatusUpdate]) -> set[str]:
        """Store many status changes in one transaction (one poll → one commit).

        A tombstone never changes: another replica may have cancelled a job between this
        replica's poll and its commit, and the poll's view (often "vanished", i.e. lost) must
        not overwrite the cancellation. Returns the UIDs actually stored, so the caller publishes
        events only for those.
        """
        now = self._clock.time()
        todo = list(updates)
        if not todo:
            return set()

        def store(conn: sqlite3.Connection) -> set[str]:
            sql = (
                "UPDATE jobs SET phase = ?, state = ?, status = ?, revision = ?, finished_at = ?, updated_at = ? "
                "WHERE uid = ? AND phase != ?"
            )
            return {
                u.uid
                for u in todo
                if conn.execute(
                    sql, (u.phase, u.state, u.status, u.revision, u.finished_at, now, u.uid, Phase.DELETED)
                ).rowcount
            }

        return await self._write(store)

    async def mark_published(self, done: Iterable[tuple[str, int]]) -> None:
        rows = [(rev, uid, rev) for uid, rev in done]
        if rows:
            await self._write(
                lambda conn: (
                    conn.executemany("UPDATE jobs SET published = ? WHERE uid = ? AND published < ?", rows).rowcount
                )
            )

    async def mark_deleted(self, uid: str, status: bytes, state: int, revision: int) -> int:
        """Write the tombstone; returns the revision it got.

        That is ``revision`` unless another replica's poll stored a newer one meanwhile: then
        the one after it, so the cancellation is the last word the gateway hears.
        """
        now = self._clock.time()
        params = (Phase.DELETED, status, state, revision, now, now, uid)

        def store(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "UPDATE jobs SET phase = ?, status = ?, state = ?, revision = MAX(revision + 1, ?), updated_at = ?, "
                "finished_at = COALESCE(finished_at, ?) WHERE uid = ? RETURNING revision",
                params,
            ).fetchone()
            return int(row[0]) if row is not None else revision

        return await self._write(store)

    async def live(self, owner: str) -> list[JobRow]:
        return await self._fetch(f"SELECT {COLUMNS} FROM jobs WHERE {_LIVE_OF_OWNER}", (owner, *LIVE_PHASES))

    async def live_specs(self, owner: str) -> dict[str, bytes]:
        """The stored JobScripts of ``owner``'s unfinished jobs, by uid (what they hold, for the ResourceReport):
        the two columns only, at every announcement, not whole rows with their statuses."""
        sql = f"SELECT uid, spec FROM jobs WHERE {_LIVE_OF_OWNER}"
        async with self._db.execute(sql, (owner, *LIVE_PHASES)) as cur:
            return {str(r[0]): bytes(r[1]) for r in await cur.fetchall()}

    async def statuses_ended_since(self, since: float) -> list[tuple[str, int, bytes]]:
        """(uid, revision, last status) of the jobs that ended at or after ``since`` (their usage, for the
        ResourceReport; the revision tells a status already read). By ``jobs_by_finished``: the hour's rows, not the
        retention's (a full scan of the table every announcement before)."""
        sql = "SELECT uid, revision, status FROM jobs WHERE finished_at >= ? AND status IS NOT NULL"
        async with self._db.execute(sql, (since,)) as cur:
            return [(str(r[0]), int(r[1]), bytes(r[2])) for r in await cur.fetchall()]

    async def unpublished(self, owner: str) -> list[JobRow]:
        return await self._fetch(f"SELECT {COLUMNS} FROM jobs WHERE owner = ? AND published < revision", (owner,))

    async def owners(self) -> set[str]:
        """Owners of jobs that still need tracking or publishing."""
        # two index searches (jobs_by_phase, jobs_ended_unpublished), not a scan of every row kept
        async with self._db.execute(
            f"SELECT owner FROM jobs WHERE phase IN (?, ?) UNION SELECT owner FROM jobs WHERE {ENDED_UNPUBLISHED}",
            LIVE_PHASES,
        ) as cur:
            return {str(r[0]) for r in await cur.fetchall()}

    async def adopt(self, dead_owner: str, new_owner: str) -> int:
        params = (new_owner, dead_owner, *LIVE_PHASES)
        n = await self._write(
            lambda conn: (
                conn.execute(
                    "UPDATE jobs SET owner = ? WHERE owner = ? AND (phase IN (?, ?) OR published < revision)", params
                ).rowcount
            )
        )
        return n

    async def page(self, *, include_finished: bool, after: str, limit: int) -> list[JobRow]:
        if include_finished:  # every job still remembered: finished and cancelled ones too
            return await self._fetch(
                f"SELECT {COLUMNS} FROM jobs WHERE uid > ? ORDER BY uid LIMIT ?",
                (after, limit),
            )
        return await self._fetch(
            f"SELECT {COLUMNS} FROM jobs WHERE uid > ? AND phase IN (?, ?) ORDER BY uid LIMIT ?",
            (after, *LIVE_PHASES, limit),
        )

    async def count(self) -> int:
        async with self._db.execute("SELECT COUNT(*) FROM jobs") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def prune(self, older_than: float) -> int:
        """Forget finished jobs older than the retention, so the file does not grow forever."""
        params = (Phase.DONE, Phase.DELETED, older_than)
        n = await self._write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM jobs WHERE phase IN (?, ?) AND published >= revision AND finished_at < ?", params
                ).rowcount
            )
        )
        return n
