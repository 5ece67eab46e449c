"""The registry carries a schema version: an upgrade from release 0.1.0's registry keeps every job.

0.1.0 wrote no version; a site upgrading in place must find its jobs again (the submitter adopts
them), and a registry written by a newer release must be refused, never guessed at.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from interlink_nats.submitters.core.lifecycle import LIVE_PHASES, Phase
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import ENDED_UNPUBLISHED, SCHEMA_VERSION, RegistryError

# The registry as release 0.1.0 created it (submitters/state/registry.py at that release), kept verbatim.
SCHEMA_0_1_0 = """
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


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def make_0_1_0_registry(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_0_1_0)
        conn.execute(
            "INSERT INTO jobs (uid, namespace, name, phase, job_id, owner, job_dir, init_containers, containers, spec,"
            " state, status, revision, published, created_at, updated_at, finished_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                "u-1",
                "ns",
                "pod",
                "active",
                "4242",
                "old-host-1",
                "/state/jobs/u-1",
                "[]",
                '["main"]',
                b"spec",
                2,
                None,
                3,
                3,
                1000.0,
                1001.0,
                None,
            ),
        )
    assert user_version(path) == 0


async def test_a_0_1_0_registry_is_migrated_in_place_keeping_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite3"
    make_0_1_0_registry(path)
    registry = await Registry.open(path)
    try:
        row = await registry.get("u-1")
        assert row is not None
        assert (row.phase, row.job_id, row.owner, row.containers, row.revision) == (
            Phase.ACTIVE,
            "4242",
            "old-host-1",
            ("main",),
            3,
        )
        assert row.gang == "", "a job from before pod groups is a single pod"
        assert [r.uid for r in await registry.live("old-host-1")] == ["u-1"]
    finally:
        await registry.close()
    assert user_version(path) == SCHEMA_VERSION == 3
    again = await Registry.open(path)  # a second start finds nothing to migrate
    await again.close()
    assert user_version(path) == SCHEMA_VERSION


async def test_a_new_registry_starts_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite3"
    registry = await Registry.open(path)
    await registry.close()
    assert user_version(path) == SCHEMA_VERSION


async def test_a_registry_from_a_newer_release_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite3"
    make_0_1_0_registry(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(RegistryError, match=r"schema version 99, newer than this release's 3"):
        await Registry.open(path)
    assert user_version(path) == 99, "a refused registry is left as it was"


async def test_a_version_1_registry_gains_the_gang_column_and_keeps_its_jobs(tmp_path: Path) -> None:
    """1 → 2 (pod groups): every existing job reads as a single pod; a new member row records its gang."""
    path = tmp_path / "registry.sqlite3"
    make_0_1_0_registry(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 1")
    registry = await Registry.open(path)
    try:
        old = await registry.get("u-1")
        assert old is not None and old.gang == "" and old.job_id == "4242"
        created, row = await registry.claim(
            uid="m-0",
            namespace="ns",
            name="member-0",
            owner="me",
            job_dir=tmp_path / "jobs" / "m-0",
            init_containers=(),
            containers=("main",),
            spec=b"",
            status=b"",
            gang="g-1",
        )
        assert created and row.gang == "g-1"
        assert [(r.uid, r.gang) for r in await registry.gang_rows("g-1")] == [("m-0", "g-1")]
        assert await registry.gang_rows("") == [], "single pods are no gang"
    finally:
        await registry.close()
    assert user_version(path) == SCHEMA_VERSION


async def test_a_version_2_registry_gains_the_deadline_column_and_keeps_its_jobs(tmp_path: Path) -> None:
    """2 → 3: an existing job has no caller's deadline (recovery submits it as before); a new claim
    keeps its caller's, and an error answer moves it to now, only while the job is still submitting."""
    path = tmp_path / "registry.sqlite3"
    make_0_1_0_registry(path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE jobs ADD COLUMN gang TEXT NOT NULL DEFAULT ''")
        conn.execute("PRAGMA user_version = 2")
    registry = await Registry.open(path)
    try:
        old = await registry.get("u-1")
        assert old is not None and old.deadline is None and old.job_id == "4242"
        created, row = await registry.claim(
            uid="n-0",
            namespace="ns",
            name="new",
            owner="me",
            job_dir=tmp_path / "jobs" / "n-0",
            init_containers=(),
            containers=("main",),
            spec=b"",
            status=b"",
            deadline=1234.5,
        )
        assert created and row.deadline == 1234.5
        stored = await registry.get("n-0")
        assert stored is not None and stored.deadline == 1234.5
        await registry.set_deadline(["n-0", "u-1"], 99.0)
        moved, active = await registry.get("n-0"), await registry.get("u-1")
        assert moved is not None and moved.deadline == 99.0
        assert active is not None and active.deadline is None, "only a submission still submitting has a deadline"
    finally:
        await registry.close()
    assert user_version(path) == SCHEMA_VERSION == 3


async def test_an_older_registry_gains_the_timer_indexes_and_the_timed_reads_use_them(tmp_path: Path) -> None:
    """What the submitter reads on a timer visits what is live, not every row the retention keeps: the ResourceReport's
    recent usage (the jobs that ended in the last hour, every announcement) by ``jobs_by_finished``, the owners of
    live or unpublished jobs (every third poll, to adopt a dead replica's) by ``jobs_by_phase`` and
    ``jobs_ended_unpublished``. A registry from before the indexes gets them at its next open, its version unchanged
    (indexes only: an older release reads the file as before)."""
    path = tmp_path / "registry.sqlite3"
    make_0_1_0_registry(path)
    with sqlite3.connect(path) as conn:
        old_status = b"\x1a\x02\x08\x01"
        rows = [
            (
                f"u-{i}",
                "ns",
                "pod",
                "done",
                "",
                "o",
                f"/j/{i}",
                "[]",
                '["main"]',
                b"s",
                3,
                old_status,
                1,
                1,
                1.0,
                1.0,
                t,
            )
            for i, t in enumerate((100.0, 5000.0, 9000.0), start=2)
        ]
        conn.executemany(
            "INSERT INTO jobs (uid, namespace, name, phase, job_id, owner, job_dir, init_containers, containers, spec,"
            " state, status, revision, published, created_at, updated_at, finished_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        conn.execute("UPDATE jobs SET owner = 'gone-host', revision = 2 WHERE uid = 'u-2'")  # an event unpublished
    registry = await Registry.open(path)
    ran: list[str] = []  # each read's statement as the registry ran it (values bound): planned below, not restated
    try:
        await registry._db.set_trace_callback(ran.append)
        assert sorted(await registry.statuses_ended_since(5000.0)) == [("u-3", 1, old_status), ("u-4", 1, old_status)]
        usage_sql = ran[-1]
        # u-1 is live (old-host-1's), u-2 ended with an event not yet published, u-3 and u-4 are over ("o")
        assert await registry.owners() == {"old-host-1", "gone-host"}
        owners_sql = ran[-1]
    finally:
        await registry.close()

    def plan(sql: str) -> str:
        with sqlite3.connect(path) as conn:
            return " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql))

    assert "finished_at" in usage_sql and "owner" in owners_sql, (usage_sql, owners_sql)
    usage_plan = plan(usage_sql)
    assert "USING INDEX jobs_by_finished" in usage_plan, usage_plan
    owners_plan = plan(owners_sql)
    assert ENDED_UNPUBLISHED in owners_sql, owners_sql
    # the one scan is of the partial index, which holds only the ended rows with an unpublished event
    index = "jobs_ended_unpublished"
    assert owners_plan.count("SCAN jobs") == owners_plan.count(f"SCAN jobs USING INDEX {index}"), owners_plan
    assert "jobs_by_phase" in owners_plan and index in owners_plan, owners_plan
    live = ", ".join(repr(str(phase)) for phase in LIVE_PHASES)
    assert f"NOT IN ({live})" in ENDED_UNPUBLISHED, "the live phases, spelled out"
    assert user_version(path) == SCHEMA_VERSION
