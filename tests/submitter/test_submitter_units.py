"""Small pure pieces of the submitter's state and I/O: the job registry's claims, the batch runner, acked publishing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.submitters.state.registry import Registry


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
    from interlink_nats.submitters.core.lifecycle import Phase
    from interlink_nats.submitters.state.schema import StatusUpdate

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
    import asyncio
    import sqlite3

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
    import asyncio
    import threading

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
