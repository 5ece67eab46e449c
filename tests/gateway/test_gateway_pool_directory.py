"""The gateway asks a pool it has not heard from with ``Describe`` once, however many creates arrive for it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.pools import PoolDirectory


class CountingPool:
    """A pool's ``Describe``: counts the calls and answers when the test releases it."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def describe(self, pool: str, deadline_s: float) -> pb.DescribeResponse:
        self.calls += 1
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return pb.DescribeResponse(pool=pool, build_config=pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))


def directory(pool: CountingPool) -> PoolDirectory:
    return PoolDirectory(cast(Any, None), pool.describe)  # no NATS: build_config asks only ``describe``


async def test_a_burst_of_creates_for_an_unknown_pool_asks_it_once() -> None:
    """Before: each of the burst's creates sent its own Describe (16 in a 64-pod burst, each a full report)."""
    pool = CountingPool()
    pools = directory(pool)
    waiting = [asyncio.ensure_future(pools.build_config("site-a", 5.0)) for _ in range(20)]
    await asyncio.sleep(0)
    pool.release.set()
    configs = await asyncio.gather(*waiting)
    assert pool.calls == 1
    assert {c.runtime for c in configs} == {pb.ContainerRuntime.NONE}
    assert (await pools.build_config("site-a", 5.0)).runtime == pb.ContainerRuntime.NONE
    assert pool.calls == 1  # remembered


async def test_a_create_that_gives_up_leaves_the_call_to_the_others() -> None:
    pool = CountingPool()
    pools = directory(pool)
    first = asyncio.ensure_future(pools.build_config("site-a", 5.0))
    second = asyncio.ensure_future(pools.build_config("site-a", 5.0))
    await asyncio.sleep(0)
    first.cancel()
    pool.release.set()
    assert (await second).runtime == pb.ContainerRuntime.NONE
    assert first.cancelled() and pool.calls == 1


async def test_a_failed_describe_fails_its_waiters_and_the_next_create_asks_again() -> None:
    pool = CountingPool()
    pools = directory(pool)
    pool.fail = TimeoutError("no answer")
    waiting = [asyncio.ensure_future(pools.build_config("site-a", 5.0)) for _ in range(3)]
    await asyncio.sleep(0)
    pool.release.set()
    for outcome in await asyncio.gather(*waiting, return_exceptions=True):
        assert isinstance(outcome, TimeoutError)
    pool.fail = None
    assert (await pools.build_config("site-a", 5.0)).runtime == pb.ContainerRuntime.NONE
    assert pool.calls == 2


async def test_stop_cancels_a_describe_in_flight() -> None:
    pool = CountingPool()
    pools = directory(pool)
    waiting = asyncio.ensure_future(pools.build_config("site-a", 5.0))
    await asyncio.sleep(0)
    await pools.stop()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_the_start_up_describe_and_a_create_share_one_call() -> None:
    pool = CountingPool()
    pools = directory(pool)
    at_start = asyncio.ensure_future(pools.describe_all({"site-a"}, 5.0))
    create = asyncio.ensure_future(pools.build_config("site-a", 5.0))
    await asyncio.sleep(0)
    pool.release.set()
    await at_start
    assert (await create).runtime == pb.ContainerRuntime.NONE
    assert pool.calls == 1
