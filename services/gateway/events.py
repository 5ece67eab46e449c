"""The gateway's durable consumer of pools' JobEvents: what keeps ``/status`` current with no polling."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, EVENTS_STREAM, events_wildcard
from interlink_nats.services.events import ensure_events_stream
from interlink_nats.services.gateway.store import PodRecord, PodStore
from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

log = logging.getLogger(__name__)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]  # IndexError past the end: a truncated message
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def status_field(event: bytes) -> bytes | None:
    """The encoded ``JobEvent.status`` as it came (the store keeps statuses encoded), so applying an
    event never encodes the status again; None when the event does not hold it exactly once.

    Only called on an event betterproto2 already parsed: this walks the top-level fields, nothing more.
    """
    found: bytes | None = None
    pos = 0
    try:
        while pos < len(event):
            key, pos = _varint(event, pos)
            wire_type = key & 7
            if wire_type == 0:
                _, pos = _varint(event, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            elif wire_type == 2:
                length, pos = _varint(event, pos)
                if key >> 3 == 1:
                    if found is not None:
                        return None  # repeated: protobuf merges the two, the parsed object is the truth
                    found = event[pos : pos + length]
                pos += length
            else:
                return None
    except (IndexError, ValueError):
        return None
    return found if pos == len(event) else None


class EventConsumer:
    """Pulls JobEvents in batches, applies the newest per pod, mirrors to redis, then acks.

    A durable consumer means a restarted gateway resumes where it stopped: no event is lost
    while it was down, and an event is acked only after the store holds it.
    """

    def __init__(
        self,
        nc: NatsClient,
        store: PodStore,
        *,
        prefix: str = DEFAULT_PREFIX,
        durable: str = "interlink-gateway",
        batch: int = 256,
        on_applied: Callable[[PodRecord], None] | None = None,
    ) -> None:
        self.nc = nc
        self.store = store
        self.prefix = prefix
        self.durable = durable
        self.batch = batch
        self.on_applied = on_applied
        self.applied = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        js = self.nc.jetstream()
        await ensure_events_stream(js, self.prefix)
        self._sub = await js.pull_subscribe(
            events_wildcard(self.prefix),
            durable=self.durable,
            stream=EVENTS_STREAM,
            config=ConsumerConfig(
                durable_name=self.durable,
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                max_ack_pending=20_000,
                ack_wait=10,
            ),
        )
        self._task = asyncio.create_task(self._run(), name="gateway-events")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        # An open pull subscription keeps a later drain() of the connection waiting for its timeout.
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                msgs = await self._sub.fetch(self.batch, timeout=1.0)
            except (TimeoutError, NatsTimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # disconnected, reconnecting: try again shortly
                log.debug("event fetch failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                await self._apply(msg.data)
                try:
                    await msg.ack()
                except Exception as exc:  # redelivery is harmless: revisions make apply idempotent
                    log.debug("event ack failed: %s", exc)

    async def _apply(self, data: bytes) -> None:
        try:
            event = pb.JobEvent.parse(data)
        except Exception as exc:  # a malformed event must not stop the consumer
            log.warning("dropping malformed JobEvent: %s", exc)
            return
        status = event.status
        if status is None or status.pod is None or not status.pod.uid:
            log.warning("dropping JobEvent without a pod")
            return
        record = self.store.apply_status(status.pod.uid, status, event.revision, encoded=status_field(data))
        if record is not None:
            self.applied += 1
            await self.store.save(record)
            if self.on_applied is not None:
                self.on_applied(record)
