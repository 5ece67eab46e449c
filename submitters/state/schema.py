"""The registry's table: its SQL, its version and migrations, and a row as a typed value.

Apart from :mod:`.registry` (the reads and writes) because this is what a schema change touches:
the table, ``SCHEMA_VERSION``, one migration step, and the row's columns.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import JobSpec
from interlink_nats.submitters.core.lifecycle import LIVE_PHASES, Phase

ENDED_UNPUBLISHED = "published < revision AND phase NOT IN ({})".format(", ".join(f"'{p.value}'" for p in LIVE_PHASES))
"""The ended rows with an event not yet marked published: the condition of the partial index
``jobs_ended_unpublished``, spelled once here for the index and for the query that must state it to use it."""

SCHEMA = f"""
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
    finished_at REAL,
    gang TEXT NOT NULL DEFAULT '',
    deadline REAL
);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, phase);
CREATE INDEX IF NOT EXISTS jobs_by_phase ON jobs (phase);
CREATE INDEX IF NOT EXISTS jobs_by_gang ON jobs (gang) WHERE gang != '';
CREATE INDEX IF NOT EXISTS jobs_by_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_ended_unpublished ON jobs (owner) WHERE {ENDED_UNPUBLISHED};
"""
"""Two indexes for what the submitter reads on a timer, so that costs what is live, not what the retention keeps
(7 days of jobs: each was a scan of every row kept, 20 ms of CPU for 30,000 rows):
``jobs_by_finished``: the ResourceReport's recent usage (the jobs that ended in the last hour, every announcement)
and the retention's prune read a range of end times. ``jobs_ended_unpublished``: the ended rows with an event not yet
marked published (a handful: marked within a second), which the search for dead replicas' jobs reads every third
poll beside the live ones (``jobs_by_phase``). Ended only: a live job's row changes at each of its statuses, and a
live row in the index would be rewritten there each time (a WAL page more per commit, measured); an ended row enters
once, with its last status, and leaves at its mark. The query states the index's condition (``ENDED_UNPUBLISHED``):
SQLite uses a partial index only then.
Indexes only: ``CREATE ... IF NOT EXISTS`` adds them to a registry of any version at its next open, and a release
without them reads the file as before."""


class RegistryError(Exception):
    """The registry could not be read or written (translated from sqlite errors)."""


SCHEMA_VERSION = 3
"""The registry's layout, kept in SQLite's ``user_version``. A release that changes ``SCHEMA`` adds a step to
``_MIGRATIONS`` and bumps this; 0 is a registry written before versioning (release 0.1.0), same tables as 1."""


def _stamp_unversioned(conn: sqlite3.Connection) -> None:
    """0 → 1: the 0.1.0 tables are version 1's; ``CREATE ... IF NOT EXISTS`` already added any missing index."""


def _add_gang(conn: sqlite3.Connection) -> None:
    """1 → 2: ``gang``, the group uid of a pod-group member ('' for a single pod), so recovery never
    submits a member alone and the poller knows which rows share one backend job."""
    conn.execute("ALTER TABLE jobs ADD COLUMN gang TEXT NOT NULL DEFAULT ''")


def _add_deadline(conn: sqlite3.Connection) -> None:
    """2 → 3: ``deadline``, when the caller of a Submit stops waiting for it (NULL: never), so a
    submission nobody waits for any more is never started later, by a resumed Submit or by recovery."""
    conn.execute("ALTER TABLE jobs ADD COLUMN deadline REAL")


_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _stamp_unversioned,
    2: _add_gang,
    3: _add_deadline,
}
"""Step to version N from N-1; each runs inside the one transaction that also sets the new version."""


def migrate(conn: sqlite3.Connection, path: Path) -> tuple[int, int]:
    """Bring the registry at ``path`` to SCHEMA_VERSION in one transaction: (found version, new version).

    A registry from a newer release is refused: an old release must never guess at a layout it does not know.
    """
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise RegistryError(
            f"registry {path} has schema version {found}, newer than this release's {SCHEMA_VERSION}: "
            "run the release that wrote it (or restore the registry's backup taken before the upgrade)"
        )
    fresh = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").fetchone() is None
    if not fresh and found < SCHEMA_VERSION:
        # Old tables first (a step may add the columns SCHEMA's indexes name), all or nothing.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for version in range(found + 1, SCHEMA_VERSION + 1):
                _MIGRATIONS[version](conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    conn.executescript(SCHEMA)  # creates what is missing (all of it for a new registry); idempotent
    if fresh:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return SCHEMA_VERSION, SCHEMA_VERSION
    return found, SCHEMA_VERSION


COLUMNS = (
    "uid, namespace, name, phase, job_id, owner, job_dir, init_containers, containers, spec, state, status, "
    "revision, published, created_at, updated_at, finished_at, gang, deadline"
)


@dataclass(slots=True)
class JobRow:
    uid: str
    namespace: str
    name: str
    phase: Phase
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
    gang: str = ""
    """The group uid when this pod is a member of a gang (``SubmitGroup``): its job is the gang's one job."""
    deadline: float | None = None
    """While ``submitting``: when its caller stops waiting (unix time; None: no caller's deadline). A job not yet
    handed to the batch system by then is never submitted (``lifecycle.past_deadline``)."""

    def job_status(self) -> pb.JobStatus | None:
        if not self.status:
            return None
        status = pb.JobStatus.parse(self.status)
        status.updated_at = _utc(self.updated_at)
        return status

    def backend_spec(self, job: pb.JobScript | None = None) -> JobSpec:
        """The backend's view of this job (its script already sits in the job directory).

        ``job``: the request's JobScript when at hand, which spares parsing the stored copy.
        """
        if job is None:
            job = self.job_spec()
        return JobSpec(
            uid=self.uid,
            job_dir=self.job_dir,
            script=self.job_dir / layout.SCRIPT_NAME,
            resources=job.resources,
            backend_flags=tuple(job.backend_flags),
            namespace=self.namespace,
            name=self.name,
            run_as_user=job.run_as_user,
            run_as_group=job.run_as_group,
            storage=tuple(job.storage),
        )

    def job_spec(self) -> pb.JobScript:
        return pb.JobScript.parse(self.spec)


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def row_from(r: Sequence[Any]) -> JobRow:
    """A ``jobs`` row as sqlite returns it (column order: ``COLUMNS``)."""
    return JobRow(
        uid=str(r[0]),
        namespace=str(r[1]),
        name=str(r[2]),
        phase=Phase(str(r[3])),
        job_id=str(r[4]),
        owner=str(r[5]),
        job_dir=Path(str(r[6])),
        init_containers=tuple(json.loads(str(r[7]))),
        containers=tuple(json.loads(str(r[8]))),
        spec=bytes(r[9]),
        state=int(r[10]),
        status=bytes(r[11]) if r[11] is not None else None,
        revision=int(r[12]),
        published=int(r[13]),
        created_at=float(r[14]),
        updated_at=float(r[15]),
        finished_at=float(r[16]) if r[16] is not None else None,
        gang=str(r[17]),
        deadline=float(r[18]) if r[18] is not None else None,
    )


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    uid: str
    phase: Phase
    state: int
    status: bytes
    revision: int
    finished_at: float | None
