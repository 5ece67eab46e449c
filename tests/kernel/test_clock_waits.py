"""Back-offs and periodic loops wait on the injected clock (``Clock.sleep``), so a test moves time instead of waiting.

Each test gives one component a :class:`ManualClock`, waits until the component is sleeping
(``ManualClock.next_sleep``, which says for how long), advances, and sees the component go on. The waits are long
(minutes) on purpose: were one still ``asyncio.sleep``, the test would hang into its deadline instead of passing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from pathlib import Path
from typing import cast

import nats
import pytest
import redis.asyncio as aioredis
from interlink_nats.controller import kube, listening, runner
from interlink_nats.controller.model import SecretRef
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.kernel.nats_connection import LEADER_RETRY_BASE_S
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.services.gateway.app import Gateway
from interlink_nats.services.gateway.errors import PoolError
from interlink_nats.services.gateway.events import EventConsumer
from interlink_nats.services.gateway.group_runner import PodGroupRunner
from interlink_nats.services.gateway.group_store import PodGroupStore
from interlink_nats.services.gateway.metrics import GatewayMetrics
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.recovery import StaleStatusRefresher
from interlink_nats.services.gateway.server import _redis_watchdog
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.services.gateway.store import PodStore, RedisLike
from interlink_nats.services.scripts import PodGroupSpec
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.shell.processes import PID_FILE
from interlink_nats.submitters.core.backend import JobSpec
from interlink_nats.submitters.edge.service import FOLLOW_INTERVAL, SubmitterServiceImpl
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.testing import FakeBackend, offline_submitter, wait_for
from kube_emulator import KubeEmulator
from nats.aio.client import Client as NatsClient

DEADLINE_S = 60.0
"""Generous: the machine is shared; a test that passes does so in milliseconds."""


async def next_sleep(clock: ManualClock) -> float:
    return await asyncio.wait_for(clock.next_sleep(), DEADLINE_S)


async def test_a_manual_sleep_ends_only_when_time_is_advanced_to_its_end() -> None:
    clock = ManualClock()
    sleeper = asyncio.create_task(clock.sleep(10.0))
    assert await next_sleep(clock) == 10.0
    clock.advance(9.5)
    await asyncio.sleep(0)  # let the sleeper run, were it woken
    assert not sleeper.done()
    clock.advance(0.5)
    await asyncio.wait_for(sleeper, DEADLINE_S)
    await clock.sleep(0)  # no wait at all: a bare yield, nothing to advance


async def test_the_pool_clients_back_off_for_a_missing_submitter_runs_on_the_clock(nats_url: str) -> None:
    """No submitter answers: waits of 50 ms doubling, none ending past ``pool_wait_s``, then the pool's error."""
    clock = ManualClock()
    nc = await nats.connect(nats_url)
    try:
        client = PoolClient(
            nc, GatewayMetrics(dict, lambda: 0), call_timeout_s=5.0, pool_wait_s=1.0, submit_resend_s=None, clock=clock
        )
        job = pb.JobScript(pod=pb.PodRef(uid=str(uuid.uuid4()), namespace="ns", name="p"), containers=["main"])
        call = asyncio.create_task(client.submit("nobody-serves-this", job))
        waits = []
        for _ in range(4):
            waits.append(await next_sleep(clock))
            clock.advance(waits[-1])
        with pytest.raises(PoolError):
            await asyncio.wait_for(call, DEADLINE_S)
        assert waits == [0.05, 0.1, 0.2, 0.4]  # the next, 0.5, would end at 1.25 s: past pool_wait_s
    finally:
        await nc.close()


async def test_the_stale_status_refresher_sweeps_on_the_clock() -> None:
    clock = ManualClock()
    refresher = StaleStatusRefresher(
        PodStore(), cast(PoolClient, None), stale_after_s=3600.0, timeout_s=5.0, clock=clock
    )
    refresher.start()
    try:
        assert await next_sleep(clock) == 1800.0
        clock.advance(1800.0)
        assert await next_sleep(clock) == 1800.0, "one sweep ran, and the loop waits again"
    finally:
        await refresher.stop()


async def test_the_gateways_pod_group_sweep_runs_on_the_clock() -> None:
    """The sweep that fails a group whose members did not all arrive in time ticks on the injected clock."""
    clock = ManualClock()
    store = PodStore()
    hold = PodGroupRunner(store, PodGroupStore(), cast(PoolClient, None), wait_s=600, clock=clock)
    await hold.start()
    try:
        await hold.hold(*_gang_member("u1", "train"))
        tick = await next_sleep(clock)
        assert tick == 1.0
        clock.advance(300)
        assert await next_sleep(clock) == 1.0, "nothing to fail yet: the loop waits again"
        await hold.hold(*_gang_member("u2", "later"))
        clock.advance(300)
        await next_sleep(clock)  # the loop came round (a group is still held): its sweep is done
        failed, waiting = store.pods["u1"].status, store.pods["u2"].status
        assert failed is not None and failed.state == pb.JobState.FAILED
        assert waiting is not None and waiting.state != pb.JobState.FAILED
    finally:
        await hold.stop()


async def test_the_pod_group_sweep_waits_for_no_time_while_no_group_is_held() -> None:
    """No timer runs in an idle gateway: the sweep begins a wait only once a group is held, and stops once none
    is (on a virtual machine each wake-up of an idle process costs it CPU)."""
    clock = ManualClock()
    store = PodStore()
    hold = PodGroupRunner(store, PodGroupStore(), cast(PoolClient, None), wait_s=600, clock=clock)
    await hold.start()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(clock.next_sleep(), 0.2)  # nothing held: no wait begun
        await hold.hold(*_gang_member("u1", "train"))
        assert await next_sleep(clock) == 1.0
        clock.advance(600)  # the group fails and is dropped: nothing held any more
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(clock.next_sleep(), 0.2)  # (meanwhile the sweep ran)
        status = store.pods["u1"].status
        assert status is not None and status.state == pb.JobState.FAILED
    finally:
        await hold.stop()


def _gang_member(uid: str, group: str) -> tuple[PodRecord, pb.JobScript, PodGroupSpec]:
    """The first of a gang of two's members."""
    record = PodRecord(uid, "ns", f"{group}-0", "a", containers=["main"])
    job = pb.JobScript(pod=pb.PodRef(uid=uid, namespace="ns", name=f"{group}-0"), containers=["main"])
    return record, job, PodGroupSpec(group, 2, pb.GangFailurePolicy.FAIL_GANG, None)


async def test_the_controllers_wait_for_kueue_runs_on_the_clock() -> None:
    clock = ManualClock()
    async with KubeEmulator(served={"vk.io": ["v1"]}) as emu:  # no Kueue installed yet
        api = kube.LightkubeApi.from_server(emu.url)
        try:
            controller = runner.Controller(api, settings=runner.Settings(clock=clock))
            detect = asyncio.create_task(controller.detect_version())
            assert await next_sleep(clock) == 1.0
            clock.advance(1.0)
            assert await next_sleep(clock) == 2.0, "doubled"
            emu.served["kueue.x-k8s.io"] = ["v1beta2"]
            clock.advance(2.0)
            assert await asyncio.wait_for(detect, DEADLINE_S) == "v1beta2"
        finally:
            await api.close()


async def test_the_controllers_connect_back_off_runs_on_the_clock(nats_url: str) -> None:
    """A MasterQueue's Secret not there yet: the connection is tried again after a wait the clock gives."""
    clock = ManualClock()
    async with KubeEmulator() as emu:
        api = kube.LightkubeApi.from_server(emu.url)
        hub = listening.NatsHub(listening.ReportStore(clock=clock), secret_reader=api.read_secret)
        conn = listening._Connection((nats_url, SecretRef(name="pool-creds", namespace="kueue-nats")))
        connecting = asyncio.create_task(hub._connect(conn))
        try:
            assert await next_sleep(clock) == 0.5  # the Secret is not found
            assert conn.nc is None
            emu.put_object("", "secrets", SECRET, namespace="kueue-nats")
            clock.advance(0.5)
            await asyncio.wait_for(connecting, DEADLINE_S)
            assert conn.nc is not None and conn.nc.is_connected
        finally:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting
            if conn.nc is not None:
                await conn.nc.close()
            await api.close()


SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "pool-creds", "namespace": "kueue-nats"},
    "data": {},
}


async def test_a_followed_log_is_read_again_on_the_clock(tmp_path: Path) -> None:
    clock = ManualClock()
    uid = str(uuid.uuid4())
    async with offline_submitter(tmp_path, FakeBackend(), instance_id="a", clock=clock) as sub:
        job = pb.JobScript(pod=pb.PodRef(uid=uid, namespace="ns", name="p"), containers=["main"], script="true\n")
        await sub.submissions.submit(job)
        assert sub.registry is not None
        row = await sub.registry.get(uid)
        assert row is not None
        log = layout.log_path(row.job_dir, "main")
        log.write_bytes(b"one\n")
        service = SubmitterServiceImpl(sub.submissions, sub.queries, describe=sub.describe, clock=clock)
        chunks = service.get_logs(pb.GetLogsRequest(pod_uid=uid, container="main", follow=True))
        try:
            assert (await asyncio.wait_for(anext(chunks), DEADLINE_S)).data == b"one\n"
            following = asyncio.create_task(anext(chunks))
            assert await next_sleep(clock) == FOLLOW_INTERVAL
            with log.open("ab") as out:
                out.write(b"two\n")
            clock.advance(FOLLOW_INTERVAL)
            assert (await asyncio.wait_for(following, DEADLINE_S)).data == b"two\n"
        finally:
            await chunks.aclose()


async def test_the_shell_backends_launch_retry_runs_on_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher cannot be started (its interpreter is missing): the launch is tried again after a clock wait."""
    clock = ManualClock()
    backend = ShellBackend(max_concurrent=1, clock=clock)
    job_dir = tmp_path / "u1"
    spec = JobSpec("u1", job_dir, jobfiles.prepare_job_dir(job_dir, "#!/bin/bash\ntrue\n"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    await backend.start()
    try:
        await backend.submit(spec)
        assert await next_sleep(clock) == 0.1  # the first attempt failed
        assert not (job_dir / PID_FILE).exists()
        monkeypatch.undo()  # the interpreter is back
        clock.advance(0.1)

        async def launched() -> bool | None:
            return (job_dir / PID_FILE).exists() or None

        await wait_for(launched, timeout=DEADLINE_S, what="the second attempt to launch the job")
    finally:
        await backend.close()


async def test_the_gateways_redis_watchdog_repairs_the_mirror_on_the_clock(redis_url: str) -> None:
    """The mirror lost (a flushed redis): repaired at the watchdog's next tick, which the clock gives."""
    clock = ManualClock()
    client = aioredis.from_url(redis_url)
    key = f"test-pods-{uuid.uuid4().hex[:8]}"  # the redis-server is shared by the session
    try:
        store = PodStore(cast(RedisLike, client), key=key)
        await store.load()
        await store.put(PodRecord(uid="uid-1", namespace="default", name="pod-1", pool="p", containers=["main"]))
        settings = GatewaySettings(nats=GatewayNatsSettings(url="nats://127.0.0.1:1"), default_pool="p")
        gateway = Gateway(settings, NatsClient(), store, redis=cast(RedisLike, client), clock=clock)
        watchdog = asyncio.create_task(_redis_watchdog(gateway))
        try:
            assert await next_sleep(clock) == 5.0
            await client.delete(key, store.epoch_key)
            clock.advance(5.0)
            assert await next_sleep(clock) == 5.0  # the loop came round: its resync is done
            assert await client.hkeys(key) == [b"uid-1"]
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
    finally:
        await client.delete(key)
        await client.aclose()


async def test_the_gateways_event_fetch_retry_runs_on_the_clock(nats_url: str) -> None:
    """The connection gone under the event consumer: each failed fetch waits a (jittered) retry delay the clock
    gives, and nothing more happens until time is advanced."""
    clock = ManualClock()
    nc = await nats.connect(nats_url)
    durable = f"clock-waits-{uuid.uuid4().hex[:8]}"  # the stream is the session's, this consumer the test's
    events = EventConsumer(nc, PodStore(), durable=durable, clock=clock)
    await events.start()
    try:
        await nc.close()
        first = await next_sleep(clock)
        assert LEADER_RETRY_BASE_S / 2 <= first <= LEADER_RETRY_BASE_S
        clock.advance(first)
        second = await next_sleep(clock)
        assert LEADER_RETRY_BASE_S / 2 <= second <= 2 * LEADER_RETRY_BASE_S, "the next try waits again"
    finally:
        await events.stop()
        admin = await nats.connect(nats_url)
        try:
            await admin.jetstream().delete_consumer(EVENTS_STREAM, durable)
        finally:
            await admin.close()
