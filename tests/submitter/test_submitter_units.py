"""Small pure pieces of the submitter's state and I/O: the job registry's claims, the batch runner, acked publishing;
the registry's writes on the event loop (``state.inline``): a lone write commits there, durable at once, without
the writer thread's hop; a write never overtakes one queued before it; another process's lock sends it to the
thread, which waits for the lock, and the loop goes on meanwhile; the WAL is checkpointed though the loop's
connection never checkpoints itself."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.state import registry as registry_module
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import StatusUpdate


def claim_fields(tmp_path: Path) -> dict[str, Any]:
    """One claim's fields but its uid: a pod of one container, owned by instance ``a``."""
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


async def test_registry_claims_once_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    kw = claim_fields(tmp_path)
    created, row = await reg.claim(uid="u1", **kw)
    assert created
    assert row.phase == "submitting"
    again, _ = await reg.claim(uid="u1", **{**kw, "owner": "b"})
    assert not again
    await reg.mark_submitted("u1", "77")
    await reg.close()
    reg = await Registry.open(path)
    row2 = await reg.get("u1")
    assert row2 is not None
    assert (row2.phase, row2.job_id, row2.owner) == ("active", "77", "a")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert await reg.adopt("a", "b") == 1
    assert [r.uid for r in await reg.live("b")] == ["u1"]
    await reg.close()


async def test_live_specs_are_the_owners_unfinished_jobs_stored_scripts_by_uid(tmp_path: Path) -> None:
    """What the ResourceReport's ``held`` reads at every announcement: uid -> stored JobScript, nothing else."""
    reg = await Registry.open(tmp_path / "r.sqlite3")
    kw = claim_fields(tmp_path)
    await reg.claim(uid="running", **{**kw, "spec": b"one"})
    await reg.mark_submitted("running", "1")
    await reg.claim(uid="submitting", **{**kw, "spec": b"two"})
    await reg.claim(uid="ended", **{**kw, "spec": b"three"})
    await reg.mark_submitted("ended", "3")
    await reg.save_statuses([StatusUpdate("ended", Phase.DONE, 3, b"", 2, 1.0)])
    await reg.claim(uid="others", **{**kw, "spec": b"four", "owner": "b"})
    assert await reg.live_specs("a") == {"running": b"one", "submitting": b"two"}
    assert await reg.live_specs("b") == {"others": b"four"}
    await reg.close()


async def test_a_claims_follow_up_runs_after_its_commit_only_when_it_created_the_row(tmp_path: Path) -> None:
    """``claim(then=...)``: Submit writes its job directory in the claim's thread hop, after the commit."""
    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    kw = claim_fields(tmp_path)
    seen: list[tuple[str, object]] = []

    def committed(uid: str) -> object:
        with sqlite3.connect(path) as other:  # another connection sees only committed rows
            return other.execute("SELECT phase FROM jobs WHERE uid = ?", (uid,)).fetchone()

    def follow_up(uid: str, fail: bool = False) -> None:
        seen.append((uid, committed(uid)))
        if fail:
            raise OSError(f"disk full for {uid}")

    # Concurrent claims share one transaction; a failing follow-up fails its own caller only, unwrapped.
    results = await asyncio.gather(
        reg.claim(uid="u1", then=lambda: follow_up("u1"), **kw),
        reg.claim(uid="u2", then=lambda: follow_up("u2", fail=True), **kw),
        return_exceptions=True,
    )
    assert results[0][0] is True  # type: ignore[index]
    assert results[0][1] == await reg.get("u1"), "the returned row is the row as stored"  # type: ignore[index]
    assert isinstance(results[1], OSError), "the follow-up's own error, not a RegistryError"
    assert sorted(seen) == [("u1", ("submitting",)), ("u2", ("submitting",))], "after the commit"
    row = await reg.get("u2")
    assert row is not None and row.phase == "submitting", "the claim stays durable"
    created, _ = await reg.claim(uid="u1", then=lambda: follow_up("again"), **kw)
    assert not created
    assert [u for u, _ in seen] == ["u1", "u2"], "not run for a row that already existed"
    await reg.close()


async def test_the_batch_runner_groups_what_queued_meanwhile_and_answers_each_item_alone() -> None:
    """Items queued while a batch runs make the next batch; an item's error reaches only its caller;
    ``call`` runs after what was queued before it; a closed runner takes nothing more."""
    from interlink_nats.submitters.state.batching import BatchRunner

    started, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def work(items: Sequence[int]) -> list[int | BaseException]:
        seen.append(list(items))
        if list(items) == [0]:
            started.set()
            release.wait(30)
        return [ValueError(i) if i == 2 else i * 10 for i in items]

    runner: BatchRunner[int, int] = BatchRunner(work, name="test-batches")
    first = asyncio.ensure_future(runner.run(0))
    assert await asyncio.to_thread(started.wait, 30)
    rest = [asyncio.ensure_future(runner.run(i)) for i in (1, 2, 3)]
    later = asyncio.ensure_future(runner.call(lambda: len(seen)))
    await asyncio.sleep(0)  # one loop turn: the four calls above have queued their items
    release.set()
    assert await first == 0
    assert await rest[0] == 10 and await rest[2] == 30
    with pytest.raises(ValueError, match=r"^2$"):
        await rest[1]
    assert await later == 2, "call() ran after the batch queued before it"
    assert seen == [[0], [1, 2, 3]] and runner.batches == 2
    await runner.close()
    with pytest.raises(RuntimeError):
        await runner.run(4)


async def test_publish_acked_fails_as_jetstream_publish_does(nats_url: str) -> None:
    """The outbox's publish skips building a PubAck, not the checks, against a real JetStream: a stored message
    passes, an error answer (a full stream) raises APIError, no stream raises, and so does a silent one."""
    import uuid

    import nats
    import nats.errors
    import nats.js.errors
    from interlink_nats.submitters.state.outbox import publish_acked
    from nats.js.api import DiscardPolicy, StreamConfig

    name = f"ACKED_{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], max_msgs=1, discard=DiscardPolicy.NEW))
        await publish_acked(nc, f"{name}.a", b"x")
        with pytest.raises(nats.js.errors.APIError):  # the server's answer: maximum messages exceeded
            await publish_acked(nc, f"{name}.a", b"y")
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await publish_acked(nc, f"no-stream-{name}.a", b"x")
        silent = await nc.subscribe(f"SILENT_{name}")  # a responder that never answers: the request times out
        with pytest.raises(nats.errors.TimeoutError):
            await publish_acked(nc, f"SILENT_{name}", b"x", ack_wait_s=0.5)
        await silent.unsubscribe()
        await js.delete_stream(name)
    finally:
        await nc.close()


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
        loop = asyncio.get_running_loop()
        started = loop.time()
        for _ in range(5):  # the loop keeps turning while the write waits (a wait on it would last the thread's 30 s)
            await asyncio.sleep(0.01)
        assert loop.time() - started < 15, "the loop waited for the replica's lock"
        assert not mark.done()
        assert committed(path, "u1") == ("submitting", "", 0)
    finally:
        replica.execute("COMMIT")
        replica.close()
    assert await mark
    assert committed(path, "u1") == ("active", "77", 0)
    assert reg.write_batches == 1, "it went through the thread"
    await reg.close()


def test_a_lock_held_elsewhere_is_told_by_its_extended_code_too() -> None:
    """SQLite reports the extended code (``SQLITE_BUSY_RECOVERY``: another connection recovering the WAL); such a
    write goes to the thread too, not to its caller as a failure."""
    from interlink_nats.submitters.state.inline import is_busy

    for code, busy in (
        (sqlite3.SQLITE_BUSY, True),
        (261, True),
        (517, True),
        (262, True),
        (sqlite3.SQLITE_FULL, False),
    ):
        exc = sqlite3.OperationalError("database is locked")
        exc.sqlite_errorcode = code
        assert is_busy(exc) is busy, code
    assert not is_busy(sqlite3.OperationalError("no code"))


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
