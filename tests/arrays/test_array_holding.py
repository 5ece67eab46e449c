"""Arrays being coalesced at the gateway, through PodGroupRunner with the array policy and the group store on a real
redis-server; time is a ManualClock, the pool a stand-in that records each SubmitGroup. The quiet window and the
longest wait, a restart while an array forms, a group stored by an older gateway (one JSON value per group), and
what one arrival writes to redis, which must not grow with the array."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from conftest import RedisServer
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.services.gateway.array_policy import ArrayPolicy, array_spec
from interlink_nats.services.gateway.group_runner import PodGroupRunner
from interlink_nats.services.gateway.group_store import MEMBERS_SUFFIX, REDIS_ARRAYS_KEY, PodGroupStore
from interlink_nats.services.gateway.pod_group import WAITING_REASON, PodGroup, PodGroupLimits, PodGroupMember
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore, RedisLike
from interlink_nats.services.scripts.job_array import JobOfPod
from stack import eventually

WINDOW = 2.0
SPEC = array_spec(JobOfPod("job-uid-1", "scan", 0), "pool-a", pb.JobScript(), 1000)


class Pool:
    """Stands in for the pool: records each array it is sent, answers with a job id per task."""

    def __init__(self) -> None:
        self.sent: asyncio.Queue[list[str]] = asyncio.Queue()

    async def submit_group(self, pool: str, members: list[pb.JobScript], kind: pb.GroupKind) -> pb.SubmitGroupResponse:
        assert kind == pb.GroupKind.ARRAY
        self.sent.put_nowait([m.pod.uid for m in members if m.pod])
        return pb.SubmitGroupResponse(
            job_id="77", created=True, member_job_ids=[f"77_{i}" for i in range(len(members))]
        )

    async def next_array(self) -> list[str]:
        async with asyncio.timeout(30):
            return await self.sent.get()


class CountingRedis:
    """A RedisLike around the real client that counts the bytes each HSET sends, in a transaction or not."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def count(self, name: str, key: str | None, value: str | bytes | None, mapping: dict[str, Any] | None) -> None:
        pairs = [(key, value)] if key is not None else []
        pairs += list((mapping or {}).items())
        self.written += len(name) + sum(len(str(k)) + len(v or b"") for k, v in pairs)

    async def hset(self, name: str, key: str | None = None, value: Any = None, mapping: Any = None) -> Any:
        self.count(name, key, value, mapping)
        return await self.inner.hset(name, key, value, mapping=mapping)

    def pipeline(self, transaction: bool = True) -> Any:
        return CountingPipeline(self, self.inner.pipeline(transaction=transaction))


class CountingPipeline:
    def __init__(self, outer: CountingRedis, pipe: Any) -> None:
        self.outer, self.pipe = outer, pipe

    async def __aenter__(self) -> CountingPipeline:
        await self.pipe.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.pipe.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipe, name)

    def hset(self, name: str, key: str | None = None, value: Any = None, mapping: Any = None) -> CountingPipeline:
        self.outer.count(name, key, value, mapping)
        self.pipe.hset(name, key, value, mapping=mapping)
        return self


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Any]:
    client = aioredis.from_url(redis_server.url)
    yield client
    await client.aclose()


def new_key() -> str:
    return f"{REDIS_ARRAYS_KEY}:{uuid.uuid4().hex[:8]}"


def runner(
    redis: Any,
    key: str,
    clock: ManualClock,
    pool: Pool,
    *,
    max_wait_s: float = 30.0,
    store: PodStore | None = None,
    max_payload: int | None = None,
) -> PodGroupRunner:
    return PodGroupRunner(
        store or PodStore(),
        PodGroupStore(cast(RedisLike, redis), key=key),
        cast(PoolClient, pool),
        wait_s=WINDOW,
        retry_s=60,
        limits=PodGroupLimits(group_size=1000, members_per_namespace=2**62),
        clock=clock,
        policy=ArrayPolicy(WINDOW, 1000, max_wait_s),
        max_payload=None if max_payload is None else (lambda: max_payload),
    )


def job(i: int, *, pad: int = 0) -> pb.JobScript:
    return pb.JobScript(
        pod=pb.PodRef(uid=f"u-{i:04d}", namespace="ns", name=f"scan-{i:04d}"),
        script="true" + " " * pad,
        containers=["main"],
    )


async def hold(r: PodGroupRunner, i: int, *, pad: int = 0) -> str:
    record = PodRecord(f"u-{i:04d}", "ns", f"scan-{i:04d}", "pool-a", containers=["main"])
    return await r.hold(record, job(i, pad=pad), SPEC)


def uids(*numbers: int) -> list[str]:
    return [f"u-{i:04d}" for i in numbers]


async def test_pods_arriving_every_half_window_form_one_array_and_a_gap_opens_the_next(client: Any) -> None:
    clock, pool = ManualClock(), Pool()
    r = runner(client, new_key(), clock, pool)
    jids = set()
    for i in range(13):  # one pod every WINDOW/2 for 6 s: three windows
        jids.add(await hold(r, i))
        await r.sweep()
        clock.advance(WINDOW / 2)
    assert pool.sent.empty() and len(jids) == 1, "still one array forming"
    clock.advance(WINDOW / 2)  # quiet for the window since the last pod
    await r.sweep()
    assert await pool.next_array() == uids(*range(13))
    await eventually(lambda: _empty(r), what="the first array forgotten once sent")
    clock.advance(WINDOW + 0.5)
    await hold(r, 13)
    [group] = r.held.groups.values()
    assert list(group.members) == uids(13), "a pod after the gap opens the next array"
    clock.advance(WINDOW)
    await r.sweep()
    assert await pool.next_array() == uids(13)
    await eventually(lambda: _empty(r), what="both arrays forgotten once sent")
    assert await client.hlen(r.held.key) == 0 and await client.hlen(r.held.members_key) == 0
    await r.stop()


async def _empty(r: PodGroupRunner) -> bool:
    return not r.held.groups


async def test_an_array_never_grows_past_what_one_nats_message_carries(client: Any) -> None:
    """1,000 pods of ~3 KB under a 1 MiB max_payload (NATS's default) cannot travel as one SubmitGroup: each
    array takes pods while the next one still fits, the next pod opens the next array, and every array the pool
    gets encodes within the limit; together they are every pod once, in order."""
    limit = 1024 * 1024
    clock, pool = ManualClock(), Pool()
    r = runner(client, new_key(), clock, pool, max_payload=limit)
    for i in range(1000):
        await hold(r, i, pad=3000)
    assert len(r.held.groups) == 4, "four arrays forming (290 pods each at most), none past the limit"
    clock.advance(WINDOW)
    await r.sweep()
    sent = [await pool.next_array() for _ in range(4)]
    assert sorted(u for a in sent for u in a) == uids(*range(1000))
    for array in sent:
        size = len(bytes(pb.SubmitGroupRequest(members=[job(int(u[2:]), pad=3000) for u in array])))
        assert size <= limit - 16 * 1024, (len(array), size)
    assert sorted(len(a) for a in sent)[1:] == [290, 290, 290], "each array but the last as full as the limit allows"
    # The sends forget their arrays in redis in the background: done before the client closes (else a connection
    # still in a send's hands outlives the test, and its loop).
    await eventually(lambda: _empty(r), what="every array forgotten once sent")
    await r.stop()


async def test_the_longest_wait_bounds_an_array_whose_pods_keep_coming(client: Any) -> None:
    clock, pool = ManualClock(), Pool()
    r = runner(client, new_key(), clock, pool, max_wait_s=5.0)
    for i in range(8):  # one pod a second: never quiet for the window
        await r.sweep()
        await hold(r, i)
        clock.advance(1.0)
    assert await pool.next_array() == uids(0, 1, 2, 3, 4), "sent 5 s after its first pod"
    await r.sweep()
    clock.advance(WINDOW)
    await r.sweep()
    assert await pool.next_array() == uids(5, 6, 7)
    await eventually(lambda: _empty(r), what="both arrays forgotten once sent")
    await r.stop()


async def test_a_restart_while_an_array_forms_loses_nothing_and_sends_it_once(client: Any) -> None:
    key, clock, pool = new_key(), ManualClock(), Pool()
    first = runner(client, key, clock, pool)
    await hold(first, 0)
    clock.advance(1.0)
    await hold(first, 1)
    [header] = (await client.hgetall(key)).values()
    assert "members" not in json.loads(header) and json.loads(header)["last_at"] == clock.time()
    assert await client.hlen(key + MEMBERS_SUFFIX) == 2
    del first  # the gateway stops without a word; the next one starts from redis (its pod table lost too)

    store = PodStore()
    again = runner(client, key, clock, pool, store=store)
    await again.start()
    try:
        [group] = again.held.groups.values()
        assert sorted(group.members) == uids(0, 1) and group.last_at == clock.time()
        status = store.pods["u-0000"].status
        assert status is not None and status.containers[0].reason == WAITING_REASON
        assert "2 so far" in status.containers[0].message and "at the latest" in status.containers[0].message
        clock.advance(1.5)  # within the window of the last pod before the restart
        await hold(again, 2)
        assert pool.sent.empty()
        clock.advance(WINDOW)
        await again.sweep()
        assert await pool.next_array() == uids(0, 1, 2)
        await eventually(lambda: _empty(again), what="the array forgotten once sent")
        await again.sweep()
        assert pool.sent.empty(), "sent once"
        assert [store.pods[u].job_id for u in uids(0, 1, 2)] == ["77_0", "77_1", "77_2"]
        assert await client.hlen(key) == 0 and await client.hlen(key + MEMBERS_SUFFIX) == 0
    finally:
        await again.stop()


async def test_an_array_an_older_gateway_stored_as_one_json_value_is_loaded_moved_and_sent(client: Any) -> None:
    key, clock, pool = new_key(), ManualClock(), Pool()
    name = f"{SPEC.name}:0"
    old = PodGroup("ns", name, "pool-a", 1000, 0, clock.time() - 1.0)
    for i in range(2):
        old.members[f"u-{i:04d}"] = PodGroupMember.arrived(f"u-{i:04d}", f"scan-{i:04d}", i, job(i), {})
    await client.hset(key, old.key, old.to_json())  # no last_at, members inside: as gateways stored it before

    store = PodStore()
    r = runner(client, key, clock, pool, store=store)
    await r.start()
    try:
        [group] = r.held.groups.values()
        assert sorted(group.members) == uids(0, 1) and group.last_at == group.first_at
        assert r.held.usage("ns").bytes == sum(m.size for m in old.members.values())
        header = json.loads(await client.hget(key, old.key))
        assert "members" not in header and header["last_at"] == header["first_at"]
        stored = await client.hgetall(key + MEMBERS_SUFFIX)
        assert {k.decode() for k in stored} == set(uids(0, 1))
        assert {json.loads(v)["group"] for v in stored.values()} == {old.key}
        assert store.pods["u-0001"].state == pb.JobState.PENDING
        clock.advance(1.0)  # its window counts from its first (and only known) arrival
        await r.sweep()
        assert await pool.next_array() == uids(0, 1)
    finally:
        await r.stop()


async def test_an_arrivals_redis_write_does_not_grow_with_the_array(client: Any) -> None:
    """Before: each arrival rewrote the whole group, every member's job in it: the 500th member wrote 50 times
    what the 10th did, and 1,000 interLink pods wrote gigabytes."""
    clock, pool = ManualClock(), Pool()
    counting = CountingRedis(client)
    r = runner(counting, new_key(), clock, pool)
    written: dict[int, int] = {}
    for i in range(1, 501):
        before = counting.written
        await hold(r, i, pad=2000)
        written[i] = counting.written - before
        clock.advance(0.001)
    assert pool.sent.empty() and len(r.held.groups) == 1
    assert written[10] > 2000, "the member's job is written"
    assert abs(written[500] - written[10]) <= 16, written
    [group] = r.held.groups.values()
    assert r.held.usage("ns").bytes == sum(m.size for m in group.members.values())
