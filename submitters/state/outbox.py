"""The event outbox: JobEvents waiting for JetStream, newest revision per pod, retried until acked.

Why an outbox: a status change is committed to the registry first and published afterwards,
so a NATS outage (or a crash) delays events but never loses them; on restart the registry's
unpublished rows refill the outbox.

When publishing fails (the events stream lost its leader with a node, or NATS is away) the outbox
pauses: one event at a time asks again after a short back-off (``leader_retry_delay``) rather than at
the next poll, and the rest follow once it is acked. Every event carries ``Nats-Msg-Id: <uid>:<revision>``,
so one that was stored but whose ack was lost lands once when it is sent again (the stream's
``duplicate_window``).

The live path (P9): a stream that lost its leader stores nothing until its survivors elect
another, 4-9 s after the loss by nats-server's raft timers. Meanwhile every event whose ack is late
(``LIVE_AFTER_S``) or that waits while publishing is paused is also sent once, unacknowledged, on
``<prefix>.live.<pool>`` (core NATS, no stream), and the gateway applies it at once; the stored copy that
follows later changes nothing there (the newest revision wins). In normal operation acks come in
milliseconds and nothing is sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import nats.errors
import nats.js.errors
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import Clock
from interlink_nats.kernel.nats_connection import leader_retry_delay
from interlink_nats.kernel.subjects import EVENTS_STREAM, events_subject, live_subject
from interlink_nats.services.bus.events_stream import NO_JETSTREAM, no_jetstream
from interlink_nats.submitters.core.status import encode_status, event_bytes, stamp_status
from interlink_nats.submitters.state.registry import Registry
from nats.aio.client import Client as NATS

log = logging.getLogger(__name__)

PUBLISH_CONCURRENCY = 128
PUBLISH_TIMEOUT_S = 5.0
"""How long one event waits for its ack before publishing pauses."""
PROBE_TIMEOUT_S = 1.0
"""The first ack wait of the one event sent while paused: a request lost on its way to a dead leader is sent
again within a second (safe: the message id makes a second copy of a stored event a duplicate the stream
drops). It doubles with each probe that times out, up to ``PUBLISH_TIMEOUT_S``, so acks slower than a second
(a loaded cluster) still get through."""
MARK_AFTER_S = 1.0
"""Acked events are marked published in the registry this long after the first of them, by one write for all
(each write is a hop to the registry's thread and back: two wake-ups; at one pod in flight, every event paid
its own). A crash before the mark publishes them again at the next start: the stream drops the copies (their
message ids, within its ``duplicate_window``) and the gateway keeps the newest revision, so nothing changes there."""
LIVE_AFTER_S = 0.5
"""An event not acked within this is also sent on the live subject (see the module docstring): far above an
ack's milliseconds on a loaded machine, far below the seconds a leader election takes."""


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """A JobEvent waiting for its ack, with its wire form: encoded once, when it is queued (a poll's events
    on the poll's thread, from the status bytes the poll already has), not again at every publish attempt."""

    status: pb.JobStatus
    revision: int
    data: bytes
    """``bytes(JobEvent(status, revision, instance_id))``."""


_ACK_PREFIX = b'{"stream":'
"""How the server's JSON answer to a stored message starts (Go encodes ``JSPubAckResponse``: ``error`` is left
out when empty, then ``stream``); an error answer starts with ``{"error":``."""


def message_id(uid: str, revision: int) -> str:
    """The ``Nats-Msg-Id`` of a pod's event: one per revision, so a resent event is a duplicate, a newer one not."""
    return f"{uid}:{revision}"


async def publish_acked(
    nc: NATS, subject: str, data: bytes, *, ack_wait_s: float = PUBLISH_TIMEOUT_S, msg_id: str | None = None
) -> None:
    """``JetStreamContext.publish`` without the ``PubAck`` it builds and we never read: the same request,
    the same errors. Why: parsing the ack's JSON and building a ``PubAck`` by reflection cost about as much
    as the rest of publishing one event; a plain ack is recognised by its first bytes, anything else is
    parsed as ``publish`` would. A duplicate's ack (``"duplicate": true``) is an ack."""
    headers = {"Nats-Msg-Id": msg_id} if msg_id is not None else None
    try:
        msg = await nc.request(subject, data, timeout=ack_wait_s, headers=headers)
    except nats.errors.NoRespondersError:
        raise nats.js.errors.NoStreamResponseError from None
    if msg.data.startswith(_ACK_PREFIX):
        return
    resp = json.loads(msg.data)
    if "error" in resp:
        raise nats.js.errors.APIError.from_error(resp["error"])


@dataclass(eq=False, repr=False, kw_only=True)
class Outbox:
    """Unpublished events of one instance, and the loop that publishes them."""

    pool: str
    subject_prefix: str
    instance_id: str
    clock: Clock
    registry: Callable[[], Registry | None]
    nc: NATS | None = field(init=False, default=None)
    pending: dict[str, PendingEvent] = field(init=False, default_factory=dict)
    """Newest unpublished event per pod UID."""
    stream_ready: bool = field(init=False, default=False)
    failures: int = field(init=False, default=0)
    """Publish attempts failed in a row (0: publishing normally); while > 0 one event probes at a time."""
    _paused_at: float = field(init=False, default=0.0)
    _slow_probes: int = field(init=False, default=0)
    _missing_said: str = field(init=False, default="")
    """Why the stream was last found missing, as logged: said once per reason, not at every retry."""
    _lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    _wake: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    live_sent: dict[str, int] = field(init=False, default_factory=dict)
    """Per pod, the revision last sent on the live subject and not acked yet (each is sent live once)."""
    acks_late: bool = field(init=False, default=False)
    """An ack is overdue (``LIVE_AFTER_S``) and none has come since: new events go live at once too."""
    _live_tasks: set[asyncio.Task[None]] = field(init=False, default_factory=set)
    _acked: list[tuple[str, int]] = field(init=False, default_factory=list)
    """Acked (uid, revision) not yet marked published in the registry (``MARK_AFTER_S``)."""
    _marking: asyncio.TimerHandle | None = field(init=False, default=None)
    _mark_task: asyncio.Task[None] | None = field(init=False, default=None)
    """The last timed mark (held here: the loop keeps only a weak reference to a task)."""

    def event(self, status: pb.JobStatus, revision: int, *, unstamped: bytes | None = None) -> PendingEvent:
        """The event of ``status`` (stamped now unless it has ``updated_at``). ``unstamped``: ``status`` already
        encoded without ``updated_at`` (a poll's comparison bytes), so it is not encoded again."""
        if status.updated_at is None:
            status.updated_at = self.clock.utcnow()
        encoded = encode_status(status) if unstamped is None else stamp_status(unstamped, status)
        return PendingEvent(status, revision, event_bytes(encoded, revision, self.instance_id))

    def put(self, uid: str, event: PendingEvent) -> None:
        self.pending[uid] = event
        if self.acks_late or self.failures:
            self._live_soon(uid, event)

    def add(self, uid: str, status: pb.JobStatus, revision: int) -> None:
        """Queue a status change and wake the publisher."""
        self.put(uid, self.event(status, revision))
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    async def restore(self, registry: Registry) -> None:
        """Refill from the registry: rows whose newest revision was never acknowledged."""
        for row in await registry.unpublished(self.instance_id):
            status = row.job_status()
            if status is not None and row.uid not in self.pending:
                self.pending[row.uid] = self.event(status, row.revision)

    def on_reconnect(self) -> None:
        """Publish at once. The stream is not looked up again: a reconnect does not remove it, and the lookup
        waits for the stream's leader, which a publish finds as soon (it is retried until acked either way)."""
        self.wake()

    async def ensure_stream(self) -> None:
        """Look the events stream up. Pools never create it: the gateway (or an admin step) does, and a
        pool credential rightly may not. Until it exists, events stay pending and are retried."""
        assert self.nc is not None
        js = self.nc.jetstream(timeout=5)
        try:
            await js.stream_info(EVENTS_STREAM)
        except nats.js.errors.NotFoundError:
            self._missing(f"events stream {EVENTS_STREAM} does not exist yet (the gateway creates it); events wait")
            return
        except (nats.errors.Error, TimeoutError) as exc:
            if no_jetstream(exc):
                self._missing(f"{NO_JETSTREAM}; events wait", logging.WARNING)
                return
            log.warning("cannot look up stream %s (%s); events wait until it is there", EVENTS_STREAM, exc)
            self.stream_ready = False
            return
        self.stream_ready = True
        self._missing_said = ""

    def _missing(self, why: str, level: int = logging.INFO) -> None:
        self.stream_ready = False
        if why != self._missing_said:
            log.log(level, "%s", why)
            self._missing_said = why

    async def publish_pending(self) -> int:
        """Publish every unpublished event (newest revision per pod); returns how many went out."""
        async with self._lock:
            if not self.pending or self.nc is None or not self.nc.is_connected:
                return 0
            if not self.stream_ready:
                await self.ensure_stream()
                if not self.stream_ready:
                    for uid, event in list(self.pending.items()):  # the gateway may be listening all the same
                        await self._send_live(uid, event)
                    return 0
            nc = self.nc
            subject = events_subject(self.pool, self.subject_prefix)
            batch = list(self.pending.items())
            probing = self.failures > 0
            if probing:  # one event finds out whether the stream is back before the others follow
                for uid, event in batch:  # meanwhile the gateway hears of every change on the live path
                    await self._send_live(uid, event)
                batch = batch[:1]
            loop = asyncio.get_running_loop()
            ack_wait_s = (
                min(PUBLISH_TIMEOUT_S, PROBE_TIMEOUT_S * 2**self._slow_probes) if probing else PUBLISH_TIMEOUT_S
            )
            todo = iter(batch)
            done: list[tuple[str, int]] = []
            failed = timed_out = False

            async def publisher() -> None:
                # Each takes the next event from the shared iterator: at most PUBLISH_CONCURRENCY acks awaited
                # at once, with a task per publisher rather than per event (and no semaphore).
                nonlocal failed, timed_out
                for uid, event in todo:
                    if failed:
                        return
                    late = loop.call_later(LIVE_AFTER_S, self._ack_overdue, uid, event)
                    try:
                        await publish_acked(
                            nc, subject, event.data, ack_wait_s=ack_wait_s, msg_id=message_id(uid, event.revision)
                        )
                    except (nats.errors.Error, TimeoutError) as exc:
                        if not failed and not probing:
                            log.warning("publishing events paused: %s", exc)
                            self._paused_at = self.clock.monotonic()
                        failed = True
                        timed_out = isinstance(exc, TimeoutError)
                        return
                    finally:
                        late.cancel()
                    self.acks_late = False
                    done.append((uid, event.revision))

            await asyncio.gather(*(publisher() for _ in range(min(PUBLISH_CONCURRENCY, len(batch)))))
            for uid, rev in done:
                current = self.pending.get(uid)
                if current is not None and current.revision == rev:
                    del self.pending[uid]
                if self.live_sent and self.live_sent.get(uid, 0) <= rev:
                    self.live_sent.pop(uid, None)
            if done:
                self._mark_later(done)
            if failed:
                self.failures += 1
                if probing and timed_out:
                    self._slow_probes += 1
            elif probing:
                log.info("publishing events resumed after %.1f s", self.clock.monotonic() - self._paused_at)
                self.failures = self._slow_probes = 0
                if self.pending:
                    self.wake()  # the rest, now that the stream answers
            return len(done)

    def _ack_overdue(self, uid: str, event: PendingEvent) -> None:
        """The stream has not acked ``event`` within ``LIVE_AFTER_S``: the gateway hears of it, and of every
        event waiting or still to come, on the live path until an ack comes again."""
        self._live_soon(uid, event)
        if self.acks_late:
            return  # the first overdue ack sent what was waiting; ``put`` sends what came since
        self.acks_late = True
        for other, waiting in list(self.pending.items()):
            self._live_soon(other, waiting)

    def _live_soon(self, uid: str, event: PendingEvent) -> None:
        """Send the event on the live path now, from a task (the callers cannot await)."""
        if self.live_sent.get(uid, 0) >= event.revision:
            return
        task = asyncio.ensure_future(self._send_live(uid, event))
        self._live_tasks.add(task)
        task.add_done_callback(self._live_tasks.discard)

    async def _send_live(self, uid: str, event: PendingEvent) -> None:
        """Send ``event`` once on the live subject; best effort (the stream's copy is the durable one)."""
        if self.live_sent.get(uid, 0) >= event.revision or self.nc is None or not self.nc.is_connected:
            return
        self.live_sent[uid] = event.revision
        try:
            await self.nc.publish(live_subject(self.pool, self.subject_prefix), event.data)
        except nats.errors.Error as exc:
            log.debug("live event for %s not sent: %s", uid, exc)

    def _mark_later(self, done: list[tuple[str, int]]) -> None:
        self._acked += done
        if self._marking is None:
            self._marking = asyncio.get_running_loop().call_later(MARK_AFTER_S, self._mark_due)

    def _mark_due(self) -> None:
        self._marking = None
        self._mark_task = asyncio.ensure_future(self.mark_published())

    async def mark_published(self) -> None:
        """Mark what was acked published now (at ``MARK_AFTER_S``; a stop calls it before the registry closes)."""
        if self._marking is not None:
            self._marking.cancel()
            self._marking = None
        done, self._acked = self._acked, []
        registry = self.registry()
        if done and registry is not None:
            try:
                await registry.mark_published(done)
            except Exception as exc:  # the registry closed under us: published again at the next start (no harm)
                log.debug("cannot mark %d events published: %s", len(done), exc)

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        """Publish whenever woken (or every ``interval_s``) until ``stop`` is set; while paused, after each
        back-off step instead (new events do not make it ask sooner)."""
        while not stop.is_set():
            paused = self.failures > 0
            with contextlib.suppress(TimeoutError):
                # not wait_for: on 3.11 it can swallow a cancel
                async with asyncio.timeout(leader_retry_delay(self.failures - 1) if paused else interval_s):
                    await (stop.wait() if paused else self._wake.wait())
            self._wake.clear()
            try:
                await self.publish_pending()
            except Exception:
                log.exception("publishing events failed; retrying")
