"""The gateway's durable consumer of pools' JobEvents: what keeps ``/status`` current with no polling.

Events come from the events stream (durable, acked after the store holds them) and, while the stream cannot
store them (no leader after a node loss), also from the pools' live subjects (``kernel.subjects.live_subject``;
core NATS, best effort). Both are applied alike: the newest revision per pod wins, so an event heard twice
changes the store once. An event is applied only when it comes from the pool its pod was sent to (the last
token of its subject): one pool's credential cannot change another pool's pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.nats_connection import leader_retry_delay
from interlink_nats.kernel.subjects import (
    DEFAULT_PREFIX,
    EVENTS_STREAM,
    events_wildcard,
    live_wildcard,
    pool_from_subject,
)
from interlink_nats.kernel.tasks import cancel_and_wait
from interlink_nats.services.bus.events_stream import StreamState, ensure_events_stream
from interlink_nats.services.gateway.event_wire import read_event, status_field
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import BadRequestError, NotFoundError

log = logging.getLogger(__name__)

CONSUMER_RETRIES = 30
"""Half-second tries while a just-scaled stream gets its new peers (seconds, on a loaded machine)."""


@dataclass(eq=False, repr=False, slots=True)
class EventConsumer:
    """Pulls JobEvents in batches, applies the newest per pod, mirrors to redis, then acks.

    A durable consumer means a restarted gateway resumes where it stopped: no event is lost
    while it was down, and an event is acked only after the store holds it.
    """

    nc: NatsClient
    store: PodStore
    _: KW_ONLY
    prefix: str = DEFAULT_PREFIX
    durable: str = "interlink-gateway"
    batch: int = 256
    replicas: int | None = None
    """Stream (and consumer) replicas; None: by the cluster size (see ``services.bus.events_stream``)."""
    on_applied: Callable[[PodRecord], None] | None = None
    clock: Clock = SYSTEM_CLOCK
    """What the retries wait on (tests move it instead of waiting)."""
    stream: StreamState | None = field(default=None, init=False)
    applied: int = field(default=0, init=False)
    foreign: int = field(default=0, init=False)
    """Events dropped because they came from another pool than their pod's."""
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _live: Subscription | None = field(default=None, init=False)
    _sub: JetStreamContext.PullSubscription = field(init=False)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    async def start(self) -> None:
        js = self.nc.jetstream()
        self.stream = await ensure_events_stream(
            js, self.prefix, replicas=self.replicas, server_info=getattr(self.nc, "_server_info", {})
        )
        config = ConsumerConfig(
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            max_ack_pending=20_000,
            ack_wait=10,
            # As many copies as the stream: an R1 consumer on a lost node would stall the events.
            num_replicas=self.stream.replicas,
        )
        await self._ensure_consumer(js, config)
        self._live = await self.nc.subscribe(live_wildcard(self.prefix), cb=self._on_live)
        self._sub = await js.pull_subscribe(
            events_wildcard(self.prefix), durable=self.durable, stream=EVENTS_STREAM, config=config
        )
        self._task = asyncio.create_task(self._run(), name="gateway-events")

    async def _ensure_consumer(self, js: JetStreamContext, config: ConsumerConfig) -> None:
        """Create the durable, or raise the replica count of one created before the stream was replicated.

        Right after a stream is scaled up the server may still refuse a consumer with as many replicas
        ("exceeds parent stream") until the new stream peers are in place: that is retried briefly.
        """
        try:
            info = await js.consumer_info(EVENTS_STREAM, self.durable)
        except NotFoundError:
            info = None
        wanted = config.num_replicas or 1
        if info is not None:
            cluster = info.cluster
            current = info.config.num_replicas or (1 + len(cluster.replicas or []) if cluster is not None else 1)
            if current >= wanted:
                return
            log.warning("durable consumer %s has %d replica(s), the stream %d: updating", self.durable, current, wanted)
        for attempt in range(CONSUMER_RETRIES):
            try:
                await js.add_consumer(EVENTS_STREAM, config=config)
                return
            except BadRequestError as exc:
                if "exceeds parent stream" in str(exc.description) and attempt + 1 < CONSUMER_RETRIES:
                    await self.clock.sleep(0.5)
                    continue
                if info is None:
                    raise
                log.error("durable consumer %s keeps its replica count: update refused (%s)", self.durable, exc)
                return

    async def stop(self) -> None:
        self._stopping.set()
        await cancel_and_wait(self._task)
        self._task = None
        # An open pull subscription keeps a later drain() of the connection waiting for its timeout.
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()
        if self._live is not None:
            with contextlib.suppress(Exception):
                await self._live.unsubscribe()
            self._live = None

    async def _on_live(self, msg: Msg) -> None:
        """An event sent on a pool's live subject (no ack: the stream's copy is the durable one)."""
        try:
            await self._apply(msg.data, pool_from_subject(msg.subject))
        except Exception:  # a subscription callback must not die on one event
            log.exception("applying a live event failed")

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                msgs = await self._sub.fetch(self.batch, timeout=1.0)
            except (TimeoutError, NatsTimeoutError):
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # disconnected, or the consumer has no leader (a node lost): ask again soon
                log.debug("event fetch failed: %s", exc)
                await self.clock.sleep(leader_retry_delay(failures))
                failures += 1
                continue
            failures = 0
            for msg in msgs:
                await self._apply(msg.data, pool_from_subject(msg.subject))
                try:
                    await msg.ack()
                except Exception as exc:  # redelivery is harmless: revisions make apply idempotent
                    log.debug("event ack failed: %s", exc)

    def _from_elsewhere(self, uid: str, pool: str) -> bool:
        """True (and counted, logged) when ``uid``'s pod was sent to another pool than the event's."""
        known = self.store.pods.get(uid)
        if known is None or known.pool == pool:
            return False
        self.foreign += 1
        log.warning("dropping an event for pod %s of pool %s sent by pool %s", uid, known.pool, pool)
        return True

    async def _apply(self, data: bytes, pool: str) -> None:
        view = read_event(data)  # the few fields it needs, without betterproto2 (~10x cheaper)
        if view is not None:
            if self._from_elsewhere(view.uid, pool):
                return
            record = self.store.apply_encoded(view.uid, view.status, view.state, view.job_id, view.revision)
        else:  # an event of an unusual shape, or malformed: betterproto2 decides, as it always did
            try:
                event = pb.JobEvent.parse(data)
            except Exception as exc:  # a malformed event must not stop the consumer
                log.warning("dropping malformed JobEvent: %s", exc)
                return
            status = event.status
            if status is None or status.pod is None or not status.pod.uid:
                log.warning("dropping JobEvent without a pod")
                return
            if self._from_elsewhere(status.pod.uid, pool):
                return
            record = self.store.apply_status(status.pod.uid, status, event.revision, encoded=status_field(data))
        if record is not None:
            self.applied += 1
            await self.store.save(record)
            if self.on_applied is not None:
                self.on_applied(record)
