"""What the gateway knows about pools: BuildConfigs and resource reports.

Pools announce both periodically (``<prefix>.config.<pool>``, ``<prefix>.resources.<pool>``);
a pool the gateway has not heard from yet is asked with ``Describe`` on demand, so the first pod
of a pool after a gateway restart is rendered with that pool's real BuildConfig, never a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import reported
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, InvalidPoolNameError, pool_from_subject, validate_pool
from interlink_nats.services.gateway.store import REDIS_BUILD_CONFIGS_KEY, RedisLike
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

_Announcement = TypeVar("_Announcement", pb.BuildConfig, pb.ResourceReport)

DescribeFn = Callable[[str, float], Awaitable[pb.DescribeResponse]]
"""(pool, timeout seconds) → the pool's Describe answer; raises GRPCError when it cannot."""


@dataclass(slots=True)
class PoolInfo:
    build_config: pb.BuildConfig | None = None
    report: pb.ResourceReport | None = None
    """The last report, its refused figures left out (``checked_report``)."""
    last_seen: float = 0.0
    refused: dict[str, str] = field(default_factory=dict)
    """What its last report had refused ("capacity.cpu" → why): logged when it changes, not per report."""


def checked_report(report: pb.ResourceReport, maxima: reported.Maxima) -> tuple[pb.ResourceReport, dict[str, str]]:
    """The report with every figure that is not a quantity, negative or absurd left out (a pool's bad figure
    must remove only its own share of that resource, never the ping's), and what was refused, by field."""
    refused: dict[str, str] = {}
    kept: dict[str, dict[str, str]] = {}
    for name in ("capacity", "free", "held"):
        figures: dict[str, str] = getattr(report, name)
        checked = reported.check(figures, maxima)
        kept[name] = {r: figures[r] for r in checked.values}
        refused |= {f"{name}.{r}": why for r, why in checked.refused.items()}
    if not refused:
        return report, refused
    clean = pb.ResourceReport.parse(bytes(report))
    clean.capacity, clean.free, clean.held = kept["capacity"], kept["free"], kept["held"]
    return clean, refused


@dataclass(eq=False, repr=False, slots=True)
class PoolDirectory:
    """The pools' BuildConfigs and reports, from their announcements, redis and ``Describe``."""

    nc: NatsClient
    describe: DescribeFn
    _: KW_ONLY
    prefix: str = DEFAULT_PREFIX
    redis: RedisLike | None = None
    liveness_factor: float = 3.0
    maxima: reported.Maxima = reported.DEFAULT_MAXIMA
    clock: Clock = SYSTEM_CLOCK
    pools: dict[str, PoolInfo] = field(default_factory=dict, init=False)
    _subs: list[Subscription] = field(default_factory=list, init=False)
    _describing: dict[str, asyncio.Task[pb.BuildConfig]] = field(default_factory=dict, init=False)
    """The one ``Describe`` in flight per pool that ``build_config`` waits on (see there)."""

    async def start(self) -> None:
        await self._load_from_redis()
        self._subs.append(await self.nc.subscribe(f"{self.prefix}.config.*", cb=self._on_config))
        self._subs.append(await self.nc.subscribe(f"{self.prefix}.resources.*", cb=self._on_resources))
        await self.nc.flush()

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):  # connection already closed
                await sub.unsubscribe()
        self._subs.clear()
        for asking in list(self._describing.values()):
            asking.cancel()

    def _info(self, pool: str) -> PoolInfo:
        return self.pools.setdefault(pool, PoolInfo())

    async def _on_config(self, msg: Msg) -> None:
        announced = self._announced(msg, pb.BuildConfig)
        if announced is not None:
            await self.remember_build_config(*announced)

    async def _on_resources(self, msg: Msg) -> None:
        announced = self._announced(msg, pb.ResourceReport)
        if announced is not None:
            self.remember_report(*announced)

    def remember_report(self, pool: str, report: pb.ResourceReport) -> None:
        """Keep a pool's report (announced, or in a ``Describe`` answer) with its bad figures left out; say
        once what was refused, and once when it is sane again (a pool announces every few seconds)."""
        info = self._info(pool)
        info.report, refused = checked_report(report, self.maxima)
        info.last_seen = self.clock.time()
        if refused != info.refused:
            if refused:
                problems = "; ".join(f"{where} {why}" for where, why in sorted(refused.items()))
                log.warning("pool %s reported figures the ping leaves out: %s", pool, problems)
            else:
                log.info("pool %s reports sane figures again", pool)
            info.refused = refused

    def _announced(self, msg: Msg, kind: type[_Announcement]) -> tuple[str, _Announcement] | None:
        """The announcing pool and its message; None (logged) when the subject or the bytes are not valid."""
        try:
            pool = validate_pool(pool_from_subject(msg.subject))
        except InvalidPoolNameError:
            log.warning("ignoring announcement on %s: not a valid pool subject", msg.subject)
            return None
        try:
            return pool, kind.parse(msg.data)
        except Exception as exc:  # a malformed announcement must not stop the subscription
            log.warning("ignoring malformed %s from pool %s: %s", kind.__name__, pool, exc)
            return None

    async def remember_build_config(self, pool: str, config: pb.BuildConfig) -> None:
        info = self._info(pool)
        changed = info.build_config != config
        info.build_config = config
        info.last_seen = self.clock.time()
        if changed and self.redis is not None:
            try:
                await self.redis.hset(REDIS_BUILD_CONFIGS_KEY, pool, bytes(config))
            except Exception as exc:
                log.warning("could not store BuildConfig of %s in redis: %s", pool, exc)

    async def _load_from_redis(self) -> None:
        if self.redis is None:
            return
        try:
            raw = await self.redis.hgetall(REDIS_BUILD_CONFIGS_KEY)
        except Exception as exc:
            log.warning("could not load BuildConfigs from redis: %s", exc)
            return
        for pool, data in raw.items():
            name = pool.decode() if isinstance(pool, bytes) else pool
            self._info(name).build_config = pb.BuildConfig.parse(data)

    async def build_config(self, pool: str, deadline_s: float) -> pb.BuildConfig:
        """The pool's BuildConfig: announced or cached, else asked with ``Describe`` (GRPCError if it can't)."""
        info = self.pools.get(pool)
        if info is not None and info.build_config is not None:
            return info.build_config
        return await self._describe_once(pool, deadline_s)

    async def _describe_once(self, pool: str, deadline_s: float) -> pb.BuildConfig:
        """Ask ``pool`` with ``Describe`` and remember its answer, joining the call in flight if there is one: a
        campaign's first burst after a gateway restart asked once per create, each answer a full ResourceReport
        the pool computed again. Shielded: a create that gives up does not cancel the call under the others."""
        asking = self._describing.get(pool)
        if asking is None:
            asking = self._describing[pool] = asyncio.create_task(self._described_config(pool, deadline_s))
            asking.add_done_callback(lambda done: self._forget_describe(pool, done))
        return await asyncio.shield(asking)

    async def _described_config(self, pool: str, deadline_s: float) -> pb.BuildConfig:
        described = await self.describe(pool, deadline_s)
        await self.remember_build_config(pool, described.build_config or pb.BuildConfig())
        if described.resources is not None:
            self.remember_report(pool, described.resources)
        return self._info(pool).build_config or pb.BuildConfig()

    def _forget_describe(self, pool: str, done: asyncio.Task[pb.BuildConfig]) -> None:
        """Drop the finished call (a failed one is asked again by the next create); its outcome is each
        waiter's, and with none left waiting it is read here so asyncio never logs it as unretrieved."""
        if self._describing.get(pool) is done:
            del self._describing[pool]
        if not done.cancelled():
            done.exception()

    async def describe_all(self, pools: set[str], deadline_s: float) -> None:
        """Ask every pool to describe itself, so the ping and renders are right right after a restart."""

        async def one(pool: str) -> None:
            try:
                await self._describe_once(pool, deadline_s)
            except Exception as exc:  # a pool that cannot answer now will announce itself later
                log.info("pool %s did not describe itself: %s", pool, exc)

        await asyncio.gather(*(one(pool) for pool in sorted(pools)))

    def is_live(self, pool: str) -> bool:
        info = self.pools.get(pool)
        if info is None or info.report is None:
            return False
        interval = info.report.interval_seconds or 30
        return self.clock.time() - info.last_seen <= interval * self.liveness_factor

    def live_reports(self) -> list[pb.ResourceReport]:
        return [info.report for pool, info in self.pools.items() if info.report is not None and self.is_live(pool)]

    def known_pools(self) -> list[str]:
        return sorted(self.pools)


async def discover_pools(nc: NatsClient, service_name: str, wait_s: float = 0.5) -> set[str]:
    """Pools with a live submitter, from the NATS micro ``$SRV.PING.<name>`` answers (metadata ``pool``).

    Every submitter answers, so one request gathers them all; the wait bounds how long we listen.
    """
    pools: set[str] = set()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(f"$SRV.PING.{service_name}", b"", reply=inbox)
        await nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except Exception:  # timeout: nobody else answered
                break
            try:
                pool = (json.loads(msg.data).get("metadata") or {}).get("pool")
                if pool:
                    pools.add(validate_pool(pool))
            except (ValueError, AttributeError, InvalidPoolNameError):
                log.debug("ignoring unreadable micro ping answer on %s", msg.subject)
    finally:
        await sub.unsubscribe()
    return pools
