"""The gateway's redis mirror against a real redis-server: exact under concurrency, cheap when nothing was lost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def key() -> str:
    """A hash of the test's own: the redis-server is shared by the session."""
    return f"test-pods-{uuid.uuid4().hex[:8]}"


def record(i: int) -> PodRecord:
    return PodRecord(uid=f"uid-{i:05d}", namespace="default", name=f"pod-{i}", pool="p", containers=["main"])


async def mirrored(redis: aioredis.Redis, key: str) -> set[str]:
    return {k.decode() for k in await redis.hkeys(key)}


async def test_deletes_during_a_resync_are_never_undone(redis: aioredis.Redis, key: str) -> None:
    """A /delete landing while the mirror is rewritten must not be overwritten by the stale copy
    (the pod would come back after the next gateway restart)."""
    store = PodStore(redis, key=key)
    await store.load()
    for i in range(3000):
        store.pods[f"uid-{i:05d}"] = record(i)  # in memory, not yet in redis: as after a redis outage
    await redis.delete(store.epoch_key)  # and redis lost the table
    victims = [f"uid-{i:05d}" for i in range(1500, 3000)]
    newcomers = [record(i) for i in range(5000, 5100)]
    watcher = aioredis.Redis(connection_pool=redis.connection_pool)

    async def delete_while_it_runs() -> None:
        while not await watcher.hlen(key) and not resync.done():  # noqa: ASYNC110 - the rewrite has begun
            await asyncio.sleep(0.001)
        for uid in victims:
            await store.delete(uid)
        for r in newcomers:
            await store.put(r)

    resync = asyncio.create_task(store.resync_redis())
    await asyncio.gather(resync, delete_while_it_runs())
    assert resync.result() is True
    assert await mirrored(redis, key) == set(store.pods), "redis must mirror memory exactly"
    assert not set(victims) & await mirrored(redis, key)
    await redis.delete(key, store.epoch_key)


async def test_a_delete_racing_a_create_write_is_repaired_by_the_next_resync(redis: aioredis.Redis, key: str) -> None:
    store = PodStore(redis, key=key)
    await store.load()
    r = record(1)
    put = asyncio.create_task(store.put(r))
    delete = asyncio.create_task(store.delete(r.uid))
    await asyncio.gather(put, delete)
    await store.resync_redis()
    assert await mirrored(redis, key) == set(store.pods) == set()
    await redis.delete(key, store.epoch_key)


async def test_ordinary_creates_do_not_trigger_a_rewrite(redis: aioredis.Redis, key: str) -> None:
    """A record sits in memory before its redis write lands: that is no reason to rewrite 100k pods."""
    store = PodStore(redis, key=key)
    await store.load()
    for i in range(50):
        await store.put(record(i))
    store.pods["uid-in-flight"] = record(99)  # its HSET has not landed yet
    assert await store.resync_redis() is False
    assert len(await mirrored(redis, key)) == 50


async def test_only_the_writes_that_failed_are_resynced_and_a_flush_rewrites_everything(
    redis: aioredis.Redis, key: str
) -> None:
    store = PodStore(redis, key=key)
    await store.load()
    for i in range(10):
        await store.put(record(i))
    await redis.hdel(key, "uid-00003")  # as if this write had been lost...
    store._unsynced.add("uid-00003")  # ...and the store knew it (a failed HSET)
    await store.delete("uid-00004")
    await redis.hset(key, "uid-00004", record(4).to_json())  # a stale copy the store does not know about
    assert await store.resync_redis() is True
    assert "uid-00003" in await mirrored(redis, key)
    assert "uid-00004" in await mirrored(redis, key), "a resync of the failed writes does not rewrite everything"
    await redis.delete(key, store.epoch_key)  # FLUSHALL, restart without persistence
    assert await store.resync_redis() is True
    assert await mirrored(redis, key) == set(store.pods)
    await redis.delete(key, store.epoch_key)
