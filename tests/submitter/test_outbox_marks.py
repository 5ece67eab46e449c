"""Acked events are marked published in the registry late (``outbox.MARK_AFTER_S``), by one write for many; a stop
marks them first, and a crash before the mark changes nothing downstream: the next start publishes them again and the
stream drops the copies.

A real nats-server of the test's own with the events stream; submitters that do everything but connect (the test
hands their outbox its own connection), a FakeBackend (the batch system is not the point), the real SQLite registry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.submitters.state import outbox as outbox_module
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import JobRow
from interlink_nats.submitters.testing import FakeBackend, crash, offline_submitter

POOL = "marks"
JOBS = 12


def job(uid: str) -> pb.JobScript:
    return pb.JobScript(
        pod=pb.PodRef(uid=uid, namespace="ns", name=f"pod-{uid[:8]}"), containers=["main"], script="#!/bin/bash\ntrue\n"
    )


async def test_acked_events_are_marked_by_one_write_and_a_crash_before_it_changes_nothing_downstream(
    tmp_path: Path, fresh_nats_server: NatsServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "MARK_AFTER_S", 3600.0)  # never due here: the test says when
    nc = await nats.connect(fresh_nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_events_stream(js)  # as the gateway does: pools never create it
        backend = FakeBackend()
        uids = [str(uuid.uuid4()) for _ in range(JOBS)]

        async def stored() -> int:
            return int((await js.stream_info(EVENTS_STREAM)).state.messages)

        async with offline_submitter(tmp_path, backend, instance_id="a") as a:
            for uid in uids:
                await a.submissions.submit(job(uid))
            assert (await a.poll_once()).changed == JOBS  # each job's first change: an event each
            a.outbox.nc = nc
            assert await a.outbox.publish_pending() == JOBS
            assert a.registry is not None
            assert len(await a.registry.unpublished("a")) == JOBS, "acked, not marked yet"
            assert await stored() == JOBS
            await crash(a)  # before the mark

        async with offline_submitter(tmp_path, backend, instance_id="a") as a:
            assert a.unpublished == JOBS, "the unmarked events are pending again"
            assert a.registry is not None
            registry = CountingRegistry(a.registry)
            a.outbox.registry = lambda: registry  # type: ignore[assignment,return-value]
            a.outbox.nc = nc
            assert await a.outbox.publish_pending() == JOBS
            assert await stored() == JOBS, "the stream dropped every copy (their message ids)"
            await a.outbox.mark_published()  # what MARK_AFTER_S would do
            assert registry.writes == [JOBS], "one registry write for all of them"
            assert await registry.unpublished("a") == []
    finally:
        await nc.close()


async def test_a_stop_marks_what_was_acked_before_the_registry_closes(
    tmp_path: Path, fresh_nats_server: NatsServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "MARK_AFTER_S", 3600.0)
    nc = await nats.connect(fresh_nats_server.url)
    try:
        await ensure_events_stream(nc.jetstream())
        backend = FakeBackend()
        async with offline_submitter(tmp_path, backend, instance_id="a") as a:
            await a.submissions.submit(job(str(uuid.uuid4())))
            assert (await a.poll_once()).changed == 1
            a.outbox.nc = nc
            assert await a.outbox.publish_pending() == 1
        async with offline_submitter(tmp_path, backend, instance_id="a") as a:
            assert a.unpublished == 0, "marked at the stop: nothing to publish again"
    finally:
        await nc.close()


class CountingRegistry:
    """The submitter's registry, counting the rows of each ``mark_published`` write."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.writes: list[int] = []

    async def mark_published(self, done: Iterable[tuple[str, int]]) -> None:
        rows = list(done)
        self.writes.append(len(rows))
        await self.registry.mark_published(rows)

    async def unpublished(self, owner: str) -> list[JobRow]:
        return await self.registry.unpublished(owner)
