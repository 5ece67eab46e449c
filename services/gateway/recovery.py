"""How the gateway gets its pod table back from the pools when its own memory is not enough.

- :func:`rebuild_from_pools`: redis was empty at start (lost with the gateway), so every reachable
  pool's ``ListJobs`` refills the table.
- :class:`StaleStatusRefresher`: the safety net for an event lost in a crash window (for example
  fetched by a gateway killed before it acked it): live pods no event mentioned for a while get
  their status pulled, in one batched ``GetStatus`` per pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.tasks import cancel_and_wait
from interlink_nats.services.gateway.errors import PoolError
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore

log = logging.getLogger("interlink_nats.gateway")


async def rebuild_from_pools(store: PodStore, client: PoolClient, pools: Iterable[str]) -> int:
    """Add every job the pools know and the table does not; returns how many pods were added.

    Pods come back with pool, job id and last status; images are unknown until the next create.
    """
    added = 0
    for pool in sorted(set(pools)):
        token = ""
        while True:
            try:
                reply = await client.list_jobs(pool, token)
            except PoolError as exc:
                log.warning("could not list jobs of pool %s: %s", pool, exc.message)
                break
            for status in reply.jobs:
                if status.pod is None or not status.pod.uid or store.get(status.pod.uid) is not None:
                    continue
                if status.deleted:
                    continue  # include_finished lists jobs removed by Cancel too; their pods are gone
                await store.put(
                    PodRecord(
                        uid=status.pod.uid,
                        namespace=status.pod.namespace,
                        name=status.pod.name,
                        pool=pool,
                        job_id=status.job_id,
                        init_containers=[c.name for c in status.containers if c.init],
                        containers=[c.name for c in status.containers if not c.init],
                        status=status,
                    )
                )
                added += 1
            token = reply.next_page_token
            if not token:
                break
    return added


class StaleStatusRefresher:
    """Every ``stale_after_s / 2``, pull the status of live pods no event mentioned for ``stale_after_s``.

    A long-running pod is pulled once per period; at most 10,000 pods per sweep.
    """

    MAX_PER_SWEEP = 10_000

    def __init__(
        self,
        store: PodStore,
        client: PoolClient,
        *,
        stale_after_s: float,
        timeout_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.clock = clock
        self.client = client
        self.stale_after_s = stale_after_s
        self.timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gateway-refresh-stale")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await self.clock.sleep(self.stale_after_s / 2)
            try:
                await self.sweep()
            except Exception:  # never let the safety net die
                log.exception("refreshing stale statuses failed")

    async def sweep(self) -> None:
        """One pass: the stale pods' statuses, one ``GetStatus`` batch per pool, all pools at once."""
        by_pool: dict[str, list[PodRecord]] = {}
        for record in self.store.stale(self.stale_after_s)[: self.MAX_PER_SWEEP]:
            by_pool.setdefault(record.pool, []).append(record)
        await asyncio.gather(*(self._pull(pool, records) for pool, records in by_pool.items()))

    async def _pull(self, pool: str, records: list[PodRecord]) -> None:
        try:
            reply = await self.client.get_status(pool, [r.uid for r in records], self.timeout_s)
        except PoolError as exc:
            log.debug("status fallback for pool %s failed: %s", pool, exc.message)
            return
        for status in reply.statuses:
            if status.pod is not None:
                updated = self.store.apply_status(status.pod.uid, status, 0)
                if updated is not None:
                    await self.store.save(updated)
