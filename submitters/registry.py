"""The durable job registry: one SQLite file (WAL) per pool on the site, shared by its replicas.

Why SQLite: a submitter must survive its own crash without losing or re-running a job, and
replicas on one host must agree on who owns what. One WAL database gives atomic
"insert if absent" (Submit idempotency by pod UID), durable intent records written *before*
the backend is called, and concurrent readers for status answers from any replica.

Lifecycle of a row (``phase``):
``submitting`` (intent recorded, backend not yet confirmed) → ``active`` (the backend has it)
→ ``done`` (terminal status recorded) → ``deleted`` (cancelled and files removed; kept as a
tombstone so the same UID is never run again).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiosqlite
from interlink_nats.gen.interlink_nats import v1 as pb

SUBMITTING = "submitting"
ACTIVE = "active"
DONE = "done"
DELETED = "deleted"
LIVE_PHASES = (SUBMITTING, ACTIVE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    uid TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    phase TEXT NOT NULL,
    job_id TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL,
    job_dir TEXT NOT NULL,
    init_containers TEXT NOT NULL,
    containers TEXT NOT NULL,
    spec BLOB NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    status BLOB,
    revision INTEGER NOT NULL DEFAULT 0,
    published INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, phase);
CREATE INDEX IF NOT EXISTS jobs_by_phase ON jobs (phase);
"""

_COLUMNS = (
    "uid, namespace, name, phase, job_id, owner, job_dir, init_containers, containers, spec, state, status, "
    "revision, published, created_at, updated_at, finished_at"
)


class RegistryError(Exception):
    """The registry could not be read or written (translated from sqlite errors)."""


@dataclass(slots=True)
class JobRow:
    uid: str
    namespace: str
    name: str
    phase: str
    job_id: str
    owner: str
    job_dir: Path
    init_containers: tuple[str, ...]
    containers: tuple[str, ...]
    spec: bytes
    """The JobScript without its script text (resources, flags): enough to submit again."""
    state: int
    status: bytes | None
    revision: int
    published: int
    created_at: float
    updated_at: float
    finished_at: float | None

    def job_status(self) -> pb.JobStatus | None:
        if not self.status:
            return None
        status = pb.JobStatus.parse(self.status)
        status.updated_at = _utc(self.updated_at)
        return status

    def job_spec(self) -> pb.JobScript:
        return pb.JobScript.parse(self.spec)


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def _row(r: Sequence[object]) -> JobRow:
    return JobRow(
        uid=str(r[0]), namespace=str(r[1]), name=str(r[2]), phase=str(r[3]), job_id=str(r[4]), owner=str(r[5]),
        job_dir=Path(str(r[6])), init_containers=tuple(json.loads(str(r[7]))),
        containers=tuple(json.loads(str(r[8]))), spec=bytes(r[9]),  # type: ignore[arg-type]
        state=int(r[10]), status=bytes(r[11]) if r[11] is not None else None,  # type: ignore[arg-type,call-overload]
        revision=int(r[12]), published=int(r[13]),  # type: ignore[call-overload]
        created_at=float(r[14]), updated_at=float(r[15]),  # type: ignore[arg-type]
        finished_at=float(r[16]) if r[16] is not None else None,  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    uid: str
    phase: str
    state: int
    status: bytes
    revision: int
    finished_at: float | None


class Registry:
    """Async access to the registry; one connection (aiosqlite runs it on its own thread)."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._db = db
        self.path = path

    @classmethod
    async def open(cls, path: Path) -> Registry:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            db = await aiosqlite.connect(path, timeout=30.0, isolation_level=None)
            await db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a process crash (kill -9); only power loss may drop the last commits.
            await db.execute("PRAGMA synchronous=NORMAL")
            await db.execute("PRAGMA busy_timeout=30000")
            await db.executescript(_SCHEMA)
        except Exception as exc:
            raise RegistryError(f"cannot open registry {path}: {exc}") from exc
        os.chmod(path, 0o600)
        return cls(db, path)

    async def close(self) -> None:
        await self._db.close()

    async def _fetch(self, sql: str, params: Sequence[object] = ()) -> list[JobRow]:
        async with self._db.execute(sql, params) as cur:
            return [_row(r) for r in await cur.fetchall()]

    async def claim(
        self, *, uid: str, namespace: str, name: str, owner: str, job_dir: Path,
        init_containers: Sequence[str], containers: Sequence[str], spec: bytes, status: bytes,
    ) -> tuple[bool, JobRow]:
        """Record the intent to submit, atomically: (True, row) if this call created it, else (False, existing)."""
        now = time.time()
        try:
            cur = await self._db.execute(
                f"INSERT OR IGNORE INTO jobs ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (uid, namespace, name, SUBMITTING, "", owner, str(job_dir), json.dumps(list(init_containers)),
                 json.dumps(list(containers)), spec, int(pb.JobState.PENDING), status, 1, 0, now, now, None),
            )
            created = cur.rowcount == 1
            await cur.close()
        except Exception as exc:
            raise RegistryError(f"cannot record job {uid}: {exc}") from exc
        row = await self.get(uid)
        assert row is not None
        return created, row

    async def get(self, uid: str) -> JobRow | None:
        rows = await self._fetch(f"SELECT {_COLUMNS} FROM jobs WHERE uid = ?", (uid,))
        return rows[0] if rows else None

    async def get_many(self, uids: Sequence[str]) -> dict[str, JobRow]:
        out: dict[str, JobRow] = {}
        for i in range(0, len(uids), 500):
            chunk = list(uids[i : i + 500])
            marks = ",".join("?" * len(chunk))
            for row in await self._fetch(f"SELECT {_COLUMNS} FROM jobs WHERE uid IN ({marks})", chunk):
                out[row.uid] = row
        return out

    async def mark_submitted(self, uid: str, job_id: str) -> None:
        await self._db.execute(
            "UPDATE jobs SET phase = ?, job_id = ?, updated_at = ? WHERE uid = ? AND phase = ?",
            (ACTIVE, job_id, time.time(), uid, SUBMITTING),
        )

    async def save_statuses(self, updates: Iterable[StatusUpdate]) -> None:
        """Store many status changes in one transaction (one poll → one commit)."""
        now = time.time()
        rows = [(u.phase, u.state, u.status, u.revision, u.finished_at, now, u.uid) for u in updates]
        if not rows:
            return
        await self._db.execute("BEGIN IMMEDIATE")
        try:
            await self._db.executemany(
                "UPDATE jobs SET phase = CASE WHEN phase = 'deleted' THEN phase ELSE ? END, state = ?, status = ?, "
                "revision = ?, finished_at = ?, updated_at = ? WHERE uid = ?",
                rows,
            )
            await self._db.execute("COMMIT")
        except BaseException:
            await self._db.execute("ROLLBACK")
            raise

    async def mark_published(self, done: Iterable[tuple[str, int]]) -> None:
        rows = [(rev, uid, rev) for uid, rev in done]
        if rows:
            await self._db.executemany("UPDATE jobs SET published = ? WHERE uid = ? AND published < ?", rows)

    async def mark_deleted(self, uid: str, status: bytes, state: int, revision: int) -> None:
        now = time.time()
        await self._db.execute(
            "UPDATE jobs SET phase = ?, status = ?, state = ?, revision = ?, updated_at = ?, "
            "finished_at = COALESCE(finished_at, ?) WHERE uid = ?",
            (DELETED, status, state, revision, now, now, uid),
        )

    async def live(self, owner: str) -> list[JobRow]:
        return await self._fetch(
            f"SELECT {_COLUMNS} FROM jobs WHERE owner = ? AND phase IN (?, ?)", (owner, *LIVE_PHASES)
        )

    async def unpublished(self, owner: str) -> list[JobRow]:
        return await self._fetch(f"SELECT {_COLUMNS} FROM jobs WHERE owner = ? AND published < revision", (owner,))

    async def owners(self) -> set[str]:
        """Owners of jobs that still need tracking or publishing."""
        async with self._db.execute(
            "SELECT DISTINCT owner FROM jobs WHERE phase IN (?, ?) OR published < revision", LIVE_PHASES
        ) as cur:
            return {str(r[0]) for r in await cur.fetchall()}

    async def adopt(self, dead_owner: str, new_owner: str) -> int:
        cur = await self._db.execute(
            "UPDATE jobs SET owner = ? WHERE owner = ? AND (phase IN (?, ?) OR published < revision)",
            (new_owner, dead_owner, *LIVE_PHASES),
        )
        n = cur.rowcount
        await cur.close()
        return n

    async def page(self, *, include_finished: bool, after: str, limit: int) -> list[JobRow]:
        if include_finished:
            return await self._fetch(
                f"SELECT {_COLUMNS} FROM jobs WHERE uid > ? AND phase != ? ORDER BY uid LIMIT ?",
                (after, DELETED, limit),
            )
        return await self._fetch(
            f"SELECT {_COLUMNS} FROM jobs WHERE uid > ? AND phase IN (?, ?) ORDER BY uid LIMIT ?",
            (after, *LIVE_PHASES, limit),
        )

    async def count(self) -> int:
        async with self._db.execute("SELECT COUNT(*) FROM jobs") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def prune(self, older_than: float) -> int:
        """Forget finished jobs older than the retention, so the file does not grow forever."""
        cur = await self._db.execute(
            "DELETE FROM jobs WHERE phase IN (?, ?) AND published >= revision AND finished_at < ?",
            (DONE, DELETED, older_than),
        )
        n = cur.rowcount
        await cur.close()
        return n
