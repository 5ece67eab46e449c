"""The registry's writes on the event loop (``state.inline``): a lone write commits there, durable at once, without
the writer thread's hop; a write never overtakes one queued before it; another process's lock sends it to the
thread, which waits for the lock, and the loop goes on meanwhile; the WAL is checkpointed though the loop's
connection never checkpoints itself."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.state import registry as registry_module
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import StatusUpdate


def claim_fields(tmp_path: Path) -> dict[str, Any]:
    return {
        "namespace": "n",
        "name": "p",
        "owner": "a",
        "job_dir": tmp_path / "j",
        "init_containers": [],
        "containers": ["c"],
        "spec": b"",
        "status": b"",
    }


def committed(path: Path, uid: str) -> tuple[object, ...] | None:
    """The row as another connection sees it: only what is committed (and so survives a crash of this process)."""
    with sqlite3.connect(path) as other:
        row: tuple[object, ...] | None = other.execute(
            "SELECT phase, job_id, revision FROM jobs WHERE uid = ?", (uid,)
        ).fetchone()
        return row


async def turns(n: int = 3) -> None:
    """Let the loop run ``n`` turns: a write made on the loop is done within its task's first step."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_lone_write_commits_on_the_loop_durable_before_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    await reg.claim(uid="u1", **claim_fields(tmp_path))
    assert committed(path, "u1") == ("submitting", "", 0)
    assert await reg.mark_submitted("u1", "77")
    assert committed(path, "u1") == ("active", "77", 0)
    stored = await reg.save_statuses([StatusUpdate("u1", Phase.DONE, 3, b"s", 1, 1.0)])
    assert stored == {"u1"} and committed(path, "u1") == ("done", "77", 1)
    assert reg.write_batches == 0, "no write went through the writer thread"
    await reg.close()


async def test_a_write_never_overtakes_one_queued_on_the_thread_before_it(tmp_path: Path) -> None:
    """While the thread runs a claim's follow-up (a Submit's job directory), a mark of that job waits its turn
    there, behind it, instead of committing on the loop."""
    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    entered, release = threading.Event(), threading.Event()

    def job_dir() -> None:
        entered.set()
        release.wait(60)

    claim = asyncio.ensure_future(reg.claim(uid="u1", then=job_dir, **claim_fields(tmp_path)))
    assert await asyncio.to_thread(entered.wait, 60)
    mark = asyncio.ensure_future(reg.mark_submitted("u1", "77"))
    await turns()
    assert not mark.done(), "the mark waits behind the claim's follow-up"
    release.set()
    created, _ = await claim
    assert created and await mark
    assert reg.write_batches == 2, "the claim's batch, then the mark's"
    await reg.mark_submitted("u1", "78")  # the thread idle again: back on the loop (and refused: no longer submitting)
    assert reg.write_batches == 2 and committed(path, "u1") == ("active", "77", 0)
    await reg.close()


async def test_another_process_lock_sends_the_write_to_the_thread_and_the_loop_goes_on(tmp_path: Path) -> None:
    """A replica holding the write lock: the write is not waited for on the loop (its connection gives up at
    once); the thread waits for the lock, and commits once it is free."""
    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    await reg.claim(uid="u1", **claim_fields(tmp_path))
    replica = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    replica.execute("BEGIN IMMEDIATE")  # the replica's transaction: the lock is held until its COMMIT
    try:
        mark = asyncio.ensure_future(reg.mark_submitted("u1", "77"))
        ticks = 0
        for _ in range(5):  # the loop keeps turning while the write waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 5 and not mark.done()
        assert committed(path, "u1") == ("submitting", "", 0)
    finally:
        replica.execute("COMMIT")
        replica.close()
    assert await mark
    assert committed(path, "u1") == ("active", "77", 0)
    assert reg.write_batches == 1, "it went through the thread"
    await reg.close()


async def test_the_wal_is_checkpointed_though_every_write_commits_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's connection never checkpoints (that would ``fsync`` there): a checkpoint is queued on the thread
    every ``INLINE_CHECKPOINT_EVERY`` commits, so the WAL stops growing. Without them (the control) it grows by
    at least a page a commit."""
    kw = claim_fields(tmp_path)
    updates = 400

    async def wal_after_updates(path: Path) -> int:
        reg = await Registry.open(path)
        await reg.claim(uid="u1", **kw)
        await reg.mark_submitted("u1", "1")
        for revision in range(1, updates + 1):
            await reg.save_statuses([StatusUpdate("u1", Phase.ACTIVE, 2, b"x" * 100, revision, None)])
        size = path.with_name(path.name + "-wal").stat().st_size
        await reg.close()
        return size

    monkeypatch.setattr(registry_module, "INLINE_CHECKPOINT_EVERY", 10**9)
    unchecked = await wal_after_updates(tmp_path / "control.sqlite3")
    assert unchecked >= updates * 4096, "the control: with no checkpoint the WAL holds every commit"
    monkeypatch.setattr(registry_module, "INLINE_CHECKPOINT_EVERY", 16)
    checked = await wal_after_updates(tmp_path / "r.sqlite3")
    assert checked <= 64 * 4096, f"the WAL grew to {checked} bytes"
