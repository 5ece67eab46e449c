"""The event outbox when the events stream stops answering (its leader lost with a node): it asks again within a
fraction of a second rather than at the next poll, one event at a time, and an event sent again lands once.

A real nats-server of the test's own, whose stream is deleted to make every publish fail as a leaderless
stream's do ("no responders") and created again to bring it back; and a real 3-node cluster whose stream
leader is killed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import SYSTEM_CLOCK
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, EVENTS_STREAM, events_subject, live_subject
from interlink_nats.services.bus.events_stream import ensure_events_stream, events_stream_config
from interlink_nats.services.ops.nats_server import NatsCluster, NatsServerProcess
from interlink_nats.submitters.state.outbox import Outbox, message_id, publish_acked
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats_cluster import cluster as cluster
from nats_cluster import stream_leader, wait_stream_current

POOL = "retry"
NEVER_S = 3600.0
"""The outbox's poll interval in these tests: whatever publishes, it is not the next poll."""


@pytest.fixture
async def nc(fresh_nats_server: NatsServerProcess) -> AsyncIterator[NATS]:
    client = await nats.connect(fresh_nats_server.url)
    await client.jetstream().add_stream(events_stream_config(DEFAULT_PREFIX))
    yield client
    await client.close()


def outbox_on(nc: NATS) -> Outbox:
    box = Outbox(
        pool=POOL, subject_prefix=DEFAULT_PREFIX, instance_id="sub-1", clock=SYSTEM_CLOCK, registry=lambda: None
    )
    box.nc = nc
    return box


def status(uid: str) -> pb.JobStatus:
    return pb.JobStatus(pod=pb.PodRef(uid=uid, namespace="ns", name=uid), pool=POOL, state=pb.JobState.RUNNING)


async def stored(nc: NATS) -> int:
    return (await nc.jetstream().stream_info(EVENTS_STREAM)).state.messages


async def until(condition: object, within: float = 10.0) -> None:
    """Until ``condition()`` holds (checked every 10 ms); fails after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_an_event_sent_again_lands_once(nc: NATS) -> None:
    """The message id is the pod's revision: the same one twice is stored once (its ack still an ack), a newer
    revision is stored."""
    subject = events_subject(POOL, DEFAULT_PREFIX)
    for _ in range(2):
        await publish_acked(nc, subject, b"r1", msg_id=message_id("u1", 1))
    assert await stored(nc) == 1
    await publish_acked(nc, subject, b"r2", msg_id=message_id("u1", 2))
    assert await stored(nc) == 2


async def test_a_paused_outbox_asks_again_without_waiting_for_a_poll(nc: NATS) -> None:
    box = outbox_on(nc)
    await box.ensure_stream()
    assert box.stream_ready
    await nc.jetstream().delete_stream(EVENTS_STREAM)
    for i in range(20):
        box.add(f"u{i}", status(f"u{i}"), 1)
    stop = asyncio.Event()
    runner = asyncio.create_task(box.run(stop, NEVER_S))
    try:
        await until(lambda: box.failures >= 3)  # paused, and asking again without waiting for a poll
        assert len(box.pending) == 20
        await nc.jetstream().add_stream(events_stream_config(DEFAULT_PREFIX))
        await until(lambda: not box.pending)  # within 10 s, where the next poll is an hour away
        assert box.failures == 0
        assert await stored(nc) == 20, "each event once"
    finally:
        stop.set()
        box.wake()
        await runner


async def test_acks_slower_than_the_first_probe_still_get_through(nc: NATS) -> None:
    """A stream that answers after 1.5 s (a loaded cluster): the probe's 1 s ack wait doubles after its timeout,
    so the outbox does not stay paused for ever."""
    box = Outbox(pool=POOL, subject_prefix="slow", instance_id="sub-1", clock=SYSTEM_CLOCK, registry=lambda: None)
    box.nc, box.stream_ready = nc, True
    box.add("u1", status("u1"), 1)
    stop = asyncio.Event()
    runner = asyncio.create_task(box.run(stop, NEVER_S))
    answered = asyncio.Event()

    async def slow_ack(msg: Msg) -> None:
        await asyncio.sleep(1.5)  # the server's pace, not a wait for the test's sake
        await msg.respond(b'{"stream":"SLOW","seq":1}')
        answered.set()

    try:
        await until(lambda: box.failures >= 1)  # no responders yet: paused
        await nc.subscribe(events_subject(POOL, "slow"), cb=slow_ack)
        await until(lambda: not box.pending, within=15.0)
        assert answered.is_set() and box.failures == 0
    finally:
        stop.set()
        box.wake()
        await runner


async def test_a_retried_event_whose_first_copy_was_stored_lands_once(nc: NATS) -> None:
    """The ack of a stored event lost (a leader gone between storing and answering): the registry still lists
    it, the outbox sends it again, and the stream keeps one copy."""
    box = outbox_on(nc)
    box.add("u1", status("u1"), 7)
    assert await box.publish_pending() == 1
    box.add("u1", status("u1"), 7)  # as restore() refills it when mark_published did not happen
    assert await box.publish_pending() == 1
    assert not box.pending
    assert await stored(nc) == 1


@pytest.mark.cluster
async def test_an_event_sent_again_after_the_stream_leader_is_lost_lands_once(cluster: NatsCluster) -> None:
    """kill -9 of the R3 stream's leader after it stored an event whose ack we treat as lost: the outbox, paused
    until the survivors elect a leader, sends it again with a new one, and the new leader keeps one copy
    (it knows the ids its predecessor stored)."""
    box: Outbox | None = None

    async def reconnected() -> None:
        if box is not None:
            box.on_reconnect()  # as the submitter's runtime does

    nc = await nats.connect(cluster.urls, reconnected_cb=reconnected)
    stop = asyncio.Event()
    try:
        await ensure_events_stream(nc.jetstream(timeout=5), server_info=nc._server_info)
        await wait_stream_current(nc)
        box = outbox_on(nc)
        await box.ensure_stream()
        box.add("u1", status("u1"), 1)
        assert await box.publish_pending() == 1
        box.add("u1", status("u1"), 1)  # stored, but the registry does not know: sent again
        box.add("u2", status("u2"), 1)
        await asyncio.to_thread(cluster.nodes[await stream_leader(nc, cluster)].kill_blocking)
        runner = asyncio.create_task(box.run(stop, NEVER_S))
        await until(lambda: not box.pending, within=30.0)  # the election: 4-9 s in nats-server
        assert await stored(nc) == 2, "u1 once, u2 once"
        stop.set()
        box.wake()
        await runner
    finally:
        stop.set()
        await nc.close()


async def live_events(nc: NATS) -> tuple[list[pb.JobEvent], asyncio.Event]:
    """Every event on the pool's live subject, and an event set at each arrival."""
    heard: list[pb.JobEvent] = []
    arrived = asyncio.Event()

    async def on_live(msg: Msg) -> None:
        heard.append(pb.JobEvent.parse(msg.data))
        arrived.set()

    await nc.subscribe(live_subject(POOL, DEFAULT_PREFIX), cb=on_live)
    await nc.flush()
    return heard, arrived


async def test_while_the_stream_cannot_store_every_event_goes_live_once_and_stays_pending(nc: NATS) -> None:
    """P9: during a leader election the stream stores nothing for seconds; the gateway hears of each
    change at once on the live subject, and the outbox still keeps every event until the stream acks it."""
    heard, _ = await live_events(nc)
    box = outbox_on(nc)
    await box.ensure_stream()
    await nc.jetstream().delete_stream(EVENTS_STREAM)  # every publish fails as a leaderless stream's do
    for i in range(5):
        box.add(f"u{i}", status(f"u{i}"), 1)
    stop = asyncio.Event()
    runner = asyncio.create_task(box.run(stop, NEVER_S))
    try:
        await until(lambda: len(heard) == 5)
        box.add("u0", status("u0"), 2)  # a change while paused goes live at once, not at the next probe
        await until(lambda: len(heard) == 6)
        assert sorted((e.status.pod.uid, e.revision) for e in heard) == sorted(
            [(f"u{i}", 1) for i in range(5)] + [("u0", 2)]
        )
        await until(lambda: box.failures >= 3)  # the outbox asked the stream again meanwhile...
        assert len(heard) == 6, "...without sending any event live twice"
        assert {uid: e.revision for uid, e in box.pending.items()} == {"u0": 2, "u1": 1, "u2": 1, "u3": 1, "u4": 1}
        await nc.jetstream().add_stream(events_stream_config(DEFAULT_PREFIX))
        await until(lambda: not box.pending)
        assert await stored(nc) == 5 and not box.live_sent
    finally:
        stop.set()
        box.wake()
        await runner


async def test_an_event_whose_ack_is_late_goes_live(nc: NATS) -> None:
    """The stream is there but its ack does not come (the leader died with the request): after ``LIVE_AFTER_S``
    the event goes live, and so does one queued while the ack is overdue."""
    heard, _ = await live_events(nc)
    box = Outbox(pool=POOL, subject_prefix=DEFAULT_PREFIX, instance_id="s", clock=SYSTEM_CLOCK, registry=lambda: None)
    box.nc, box.stream_ready = nc, True
    await nc.jetstream().delete_stream(EVENTS_STREAM)
    swallowed = asyncio.Event()

    async def swallow(msg: Msg) -> None:  # a responder that never answers: the request waits for its timeout
        swallowed.set()

    await nc.subscribe(events_subject(POOL, DEFAULT_PREFIX), cb=swallow)
    box.add("u1", status("u1"), 1)
    publishing = asyncio.create_task(box.publish_pending())
    await swallowed.wait()
    await until(lambda: len(heard) == 1)
    assert box.acks_late
    box.add("u2", status("u2"), 1)
    await until(lambda: len(heard) == 2)
    assert [e.status.pod.uid for e in heard] == ["u1", "u2"]
    assert await publishing == 0 and set(box.pending) == {"u1", "u2"}, "still pending until the stream acks them"


async def test_acked_events_never_go_live(nc: NATS) -> None:
    """50 events acked at once, then one whose ack never comes: only that one goes live. Its live copy is sent
    ``LIVE_AFTER_S`` after it was published, later than any of the 50 acked ones would have been."""
    heard, _ = await live_events(nc)
    box = outbox_on(nc)
    for i in range(50):
        box.add(f"u{i}", status(f"u{i}"), 1)
    assert await box.publish_pending() == 50
    assert not box.acks_late
    await nc.jetstream().delete_stream(EVENTS_STREAM)

    async def swallow(msg: Msg) -> None:
        return None

    await nc.subscribe(events_subject(POOL, DEFAULT_PREFIX), cb=swallow)
    box.add("late", status("late"), 1)
    publishing = asyncio.create_task(box.publish_pending())
    await until(lambda: len(heard) >= 1)
    assert await publishing == 0
    await nc.flush()
    assert [e.status.pod.uid for e in heard] == ["late"]


async def test_a_server_without_jetstream_is_said_once_and_a_missing_stream_then_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each reason the stream cannot be used is logged once, not at every retry, and a new reason is logged again
    (a flag kept for the first reason hid every later one)."""
    import logging

    from interlink_nats.services.bus.events_stream import NO_JETSTREAM

    caplog.set_level(logging.INFO, logger="interlink_nats.submitters.state.outbox")
    with NatsServerProcess(jetstream=False) as bare:
        client = await nats.connect(bare.url)
        box = outbox_on(client)
        for _ in range(3):
            await box.ensure_stream()
        await client.close()
    assert not box.stream_ready
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{NO_JETSTREAM}; events wait"], said
    with NatsServerProcess() as server:  # JetStream now, but nobody made the stream yet
        client = await nats.connect(server.url)
        box.nc = client
        for _ in range(3):
            await box.ensure_stream()
        await client.jetstream().add_stream(events_stream_config(DEFAULT_PREFIX))
        await box.ensure_stream()
        await client.close()
    assert box.stream_ready
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "does not exist yet" in said[1], said


def test_only_no_responders_reads_as_no_jetstream() -> None:
    """A JetStream that is there but cannot answer now (a cluster electing its meta leader answers 503 with
    err_code 10008) must not be reported as a server without JetStream: its own description says what is wrong."""
    from interlink_nats.services.bus.events_stream import no_jetstream
    from nats.js.errors import ServiceUnavailableError

    assert no_jetstream(ServiceUnavailableError())  # what nats-py raises for no responders
    electing = ServiceUnavailableError(code=503, err_code=10008, description="JetStream system temporarily unavailable")
    assert not no_jetstream(electing)
    assert not no_jetstream(TimeoutError())
