"""The gateway assembled: its parts wired together and started in the order that keeps answers right.

The parts: ``store`` (pod table), ``pools`` (BuildConfigs, reports), ``client`` (RPC to pools),
``events`` (the JetStream consumer), ``recovery`` (rebuild and stale refresh), ``calls`` (the use
cases). ``http_edge.build_app`` serves them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.gc_tuning import collect_rarely, freeze_long_lived
from interlink_nats.kernel.nats_connection import connected_server
from interlink_nats.services.bus.rpc import SERVICE_NAME
from interlink_nats.services.gateway.array_policy import ArrayPolicy
from interlink_nats.services.gateway.events import EventConsumer
from interlink_nats.services.gateway.group_runner import PodGroupRunner
from interlink_nats.services.gateway.group_store import REDIS_ARRAYS_KEY, PodGroupStore
from interlink_nats.services.gateway.metrics import GatewayMetrics
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.pools import PoolDirectory, discover_pools
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.recovery import StaleStatusRefresher, rebuild_from_pools
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.gateway.store import PodStore, RedisLike
from interlink_nats.services.gateway.usage import billed as bound_usage
from interlink_nats.services.gateway.usecases import PodUseCases
from nats.aio.client import Client as NatsClient
from tenacity import AsyncRetrying, RetryCallState, wait_exponential

log = logging.getLogger("interlink_nats.gateway")


def _log_redis_wait(state: RetryCallState) -> None:
    log.warning("waiting for redis: %s", state.outcome and state.outcome.exception())


@dataclass
class Gateway:
    """The gateway's state and behaviour, independent of how it is served."""

    settings: GatewaySettings
    nc: NatsClient
    store: PodStore
    redis: RedisLike | None = None
    clock: Clock = SYSTEM_CLOCK
    """What the gateway's back-offs and periodic loops wait on (tests move it instead of waiting)."""
    metrics: GatewayMetrics = field(init=False)
    client: PoolClient = field(init=False)
    pools: PoolDirectory = field(init=False)
    events: EventConsumer = field(init=False)
    refresher: StaleStatusRefresher = field(init=False)
    groups: PodGroupRunner = field(init=False)
    arrays: PodGroupRunner = field(init=False)
    calls: PodUseCases = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = GatewayMetrics(
            self.store.counts_by_state, lambda: len(self.pools.live_reports()), lambda: self.pools.pools
        )
        self.client = PoolClient(
            self.nc,
            self.metrics,
            call_timeout_s=self.settings.submit_timeout_s,
            pool_wait_s=self.settings.pool_wait_s,
            submit_resend_s=self.settings.submit_resend_s,
            clock=self.clock,
        )
        self.pools = PoolDirectory(
            self.nc,
            self.client.describe,
            prefix=self.settings.prefix,
            redis=self.redis,
            maxima=self.settings.report_maxima(),
        )
        self.events = EventConsumer(
            self.nc,
            self.store,
            prefix=self.settings.prefix,
            durable=self.settings.events_durable,
            replicas=self.settings.events_replicas,
            on_applied=lambda _record: self.metrics.events.inc(),
            clock=self.clock,
        )
        self.refresher = StaleStatusRefresher(
            self.store,
            self.client,
            stale_after_s=self.settings.stale_after_s,
            timeout_s=self.settings.status_fallback_timeout_s,
            clock=self.clock,
        )
        self.groups = PodGroupRunner(
            self.store,
            PodGroupStore(self.redis),
            self.client,
            wait_s=self.settings.group_wait_s,
            limits=self.settings.held_limits(),
            clock=self.clock,
        )
        self.arrays = PodGroupRunner(  # the second policy of the same mechanism, with its own held groups
            self.store,
            PodGroupStore(self.redis, key=REDIS_ARRAYS_KEY),
            self.client,
            wait_s=max(self.settings.array_window_s, 0.1),
            retry_s=self.settings.group_wait_s,
            limits=self.settings.array_limits(),
            clock=self.clock,
            policy=ArrayPolicy(
                self.settings.array_window_s, self.settings.array_max_count, self.settings.array_max_wait_s
            ),
            max_payload=lambda: self.client.nc.max_payload,
        )
        self.metrics.watch_groups(
            lambda: len(self.groups.held.groups), self.groups.held.members, lambda: self.groups.held.bytes_total
        )
        self.metrics.watch_arrays(
            lambda: len(self.arrays.held.groups), self.arrays.held.members, lambda: self.arrays.held.bytes_total
        )
        self.store.on_usage = self._bill
        self.calls = PodUseCases(self.settings, self.store, self.pools, self.client, self.groups, self.arrays)

    def _bill(self, record: PodRecord, usage: pb.JobUsage) -> None:
        """An ended pod's usage, reported by its pool, bounded by its request and billed (once: ``PodStore``)."""
        billed = bound_usage(usage, record.allowance, now=time.time())
        if billed.refused:
            why = "; ".join(f"{figure} {reason}" for figure, reason in sorted(billed.refused.items()))
            log.warning("usage of pod %s/%s reported by pool %s: %s", record.namespace, record.name, record.pool, why)
        self.metrics.bill(record.namespace, record.pool, billed)

    async def start(self) -> None:
        collect_rarely()  # before the table is restored (kernel/gc_tuning.py)
        # Serving without the pod table would answer "unknown" for live pods: wait for redis instead.
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.2, max=5), reraise=True, before_sleep=_log_redis_wait
        ):
            with attempt:
                loaded = await self.store.load()
        await self.pools.start()
        live = await discover_pools(self.nc, SERVICE_NAME)
        await self.pools.describe_all(live, self.settings.pool_wait_s)
        rebuilt = 0
        if self.redis is not None and loaded == 0:
            rebuilt = await rebuild_from_pools(self.store, self.client, {*self.pools.known_pools(), *live})
        # Events only after the table is complete: an event for a pod not in the table is dropped.
        await self.events.start()
        self.refresher.start()
        # After the events: a restored complete group is sent again, and its members' events must land.
        await self.groups.start()
        await self.arrays.start()
        # The restored table is long-lived: keep it out of the cyclic GC's full scans, whose pauses
        # would otherwise show up as /status tail latency at thousands of calls per second; and collect
        # young objects less often (kernel/gc_tuning.py).
        freeze_long_lived()
        if self.redis is None:  # memory only: nothing was restored, so say what the table holds and why
            log.info("gateway started: state in memory (no redis_url), %d pods from the pools' ListJobs", rebuilt)
        else:
            log.info("gateway started: %d pods restored from redis, %d from the pools' ListJobs", loaded, rebuilt)

    async def close(self) -> None:
        await self.groups.stop()
        await self.arrays.stop()
        await self.refresher.stop()
        await self.events.stop()
        await self.pools.stop()

    async def health(self) -> tuple[bool, dict[str, Any]]:
        """Whether the gateway can serve (NATS connected, redis answering if configured), and the details."""
        nats_ok = self.nc.is_connected
        redis_ok = True
        if self.redis is not None:
            try:
                async with asyncio.timeout(1.0):
                    await self.redis.ping()
            except Exception:
                redis_ok = False
        details = {
            "nats": nats_ok,
            "redis": redis_ok if self.redis is not None else None,
            "pods": len(self.store.pods),
            "pools_live": len(self.pools.live_reports()),
            "nats_server": connected_server(self.nc),
            "events_replicas": self.events.stream.replicas if self.events.stream else None,
        }
        return nats_ok and redis_ok, details
