"""interlink-nats on a 3-node NATS JetStream cluster: nodes are lost (``kill -9``) under load.

Real nats-servers on free loopback ports, a real gateway and a real shell submitter in this
process, pods whose one container appends its pod UID to a shared file (so "ran exactly once" is
checked by counting lines). A status must reach its final state through the events stream, within
30 s of the node's loss — the 300 s stale-status sweep is far away and never the one that helps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.errors
import nats.js.errors
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import EVENTS_STREAM, resources_subject
from interlink_nats.kernel.tasks import cancel_and_wait
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import SERVICE_NAME, submitter_client
from interlink_nats.services.gateway.pools import discover_pools
from interlink_nats.services.ops.nats_server import NatsCluster
from interlink_nats.submitters.runtime import Submitter
from nats_cluster import cluster as cluster
from nats_cluster import connected_node, lead_elsewhere, stream_leader, wait_stream_current
from stack import Stack, create_body, gateway_only, new_pool, pod, submitter_settings, terminated

RECOVERY_S = 30.0
"""A pod's status must be final this long after the node's loss (or after its own create)."""


@dataclass
class Load:
    """Creates pods through the gateway like interLink does (a 5xx is retried: create is idempotent)."""

    stack: Stack
    pool: str
    runs_file: Path
    pods: list[dict[str, Any]] = field(default_factory=list)
    created_at: dict[str, float] = field(default_factory=dict)
    retried: int = 0

    def new_pod(self) -> dict[str, Any]:
        uid = str(uuid.uuid4())
        script = f'echo "$POD_UID $(date +%s.%N)" >> {self.runs_file}'
        p = pod(uid, containers={"main": ["sh", "-c", script]}, env={"POD_UID": uid})
        self.pods.append(p)
        return p

    async def create(self, p: dict[str, Any]) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                response = await self.stack.post("/create", create_body(p))
            except httpx.TimeoutException:  # interLink gives up on a call after a while and retries it
                assert time.monotonic() < deadline, "create kept timing out"
                self.retried += 1
                continue
            if response.status_code == 200:
                self.created_at[p["metadata"]["uid"]] = time.time()
                return
            assert response.status_code >= 500 and time.monotonic() < deadline, response.text
            self.retried += 1
            await asyncio.sleep(0.5)

    async def run(self, count: int, in_flight: int, at: dict[int, Any]) -> None:
        """Create ``count`` pods; when the ``k``-th create starts, call ``at[k]()`` (a fault) first."""
        pending = [self.new_pod() for _ in range(count)]
        started = 0

        async def worker() -> None:
            nonlocal started
            while pending:
                p = pending.pop(0)
                started += 1
                fault = at.pop(started, None)
                if fault is not None:
                    await fault()
                await self.create(p)

        await asyncio.gather(*(worker() for _ in range(in_flight)))

    async def final_times(self, creates: Awaitable[None], within: float) -> dict[str, float]:
        """When each pod's /status first showed every container terminated, watched while ``creates`` runs (a
        create whose request or reply was lost with its node waits for its resend, or its deadline: the other
        pods' statuses must not seem late for it), then for ``within`` seconds more."""
        running = asyncio.ensure_future(creates)
        done: dict[str, float] = {}
        deadline = None
        try:
            while not running.done() or len(done) < len(self.pods):
                if running.done():
                    running.result()  # a failed create fails the test at once
                    deadline = deadline or time.monotonic() + within
                    if time.monotonic() > deadline:
                        break
                todo = [p for p in self.pods if p["metadata"]["uid"] not in done]
                if todo:  # (an empty list asks for the ping)
                    response = await self.stack.get("/status", todo)
                    assert response.status_code == 200, response.text
                    now = time.time()
                    for status in response.json():
                        if status["containers"] and terminated(status):
                            done[status["UID"]] = now
                await asyncio.sleep(0.25)
            await running
        finally:
            await cancel_and_wait(running)
        return done

    def runs(self) -> Counter[str]:
        return Counter(line.split()[0] for line in self.lines())

    def ended_at(self) -> dict[str, float]:
        """When each job ran (wall clock, written by the job itself)."""
        return {uid: float(at) for uid, at in (line.split() for line in self.lines())}

    def lines(self) -> list[str]:
        return self.runs_file.read_text().splitlines() if self.runs_file.exists() else []


@contextlib.asynccontextmanager
async def cluster_stack(cluster: NatsCluster, tmp_path: Path) -> AsyncIterator[tuple[Stack, Submitter, Load]]:
    pool = new_pool()
    async with (
        gateway_only(cluster.url, default_pool=None) as stack,
        Submitter(
            submitter_settings(cluster.url, pool, tmp_path / "state", shell={"max_concurrent_jobs": 32})
        ) as submitter,
    ):
        stack.pool = pool
        stack.gateway.settings.default_pool = pool
        stack.submitter = submitter
        yield stack, submitter, Load(stack, pool, tmp_path / "runs.txt")


def assert_each_ran_once_and_finished(load: Load, finals: dict[str, float], lost_at: list[float]) -> None:
    runs = load.runs()
    uids = [p["metadata"]["uid"] for p in load.pods]
    assert sorted(runs) == sorted(uids), f"{len(set(uids) - set(runs))} pods never ran"
    assert max(runs.values()) == 1, f"ran twice: {[u for u, n in runs.items() if n > 1][:5]}"
    missing = [u for u in uids if u not in finals]
    seen = {u: load.stack.gateway.store.get(u) for u in missing[:3]}
    views = {u: (r.status.state if r and r.status else None, r.revision if r else None) for u, r in seen.items()}
    assert not missing, f"{len(missing)} pods never showed a final status, e.g. {views}"
    late = []
    ended = load.ended_at()
    for uid in uids:
        # Due RECOVERY_S after the later of the job's end and the last loss before its status was final.
        start = max([ended[uid], *(t for t in lost_at if t <= finals[uid])])
        if finals[uid] - start > RECOVERY_S:
            late.append((uid, round(finals[uid] - start, 1)))
    assert not late, f"{len(late)} statuses arrived more than {RECOVERY_S}s late: {late[:5]}"


# --- the cluster scenarios -------------------------------------------------------------------------------


@pytest.mark.cluster
async def test_gateway_replicates_the_events_stream_and_its_consumer(cluster: NatsCluster, tmp_path: Path) -> None:
    nc = await nats.connect(cluster.urls)
    try:
        state = await ensure_events_stream(nc.jetstream(timeout=5), server_info=nc._server_info)
        assert (state.replicas, state.created) == (3, True)
        async with cluster_stack(cluster, tmp_path) as (stack, _submitter, _load):
            consumer = await nc.jetstream().consumer_info(EVENTS_STREAM, stack.gateway.settings.events_durable)
            assert consumer.config.num_replicas == 3
            health = (await stack.http.get("/healthz")).json()
            assert health["events_replicas"] == 3
            assert health["nats_server"] in cluster.urls
    finally:
        await nc.close()


@pytest.mark.cluster
@pytest.mark.parametrize("victim", ["stream-leader", "gateway-node", "submitter-node"])
async def test_a_lost_node_loses_no_job_and_no_status(victim: str, cluster: NatsCluster, tmp_path: Path) -> None:
    """kill -9 a node at ~30 % of the creates: every job runs once, every status is final within 30 s.

    For the stream leader the node is restarted later (and catches up) and another node is lost.
    """
    observer = await nats.connect(cluster.urls)
    lost_at: list[float] = []
    try:
        async with cluster_stack(cluster, tmp_path) as (stack, submitter, load):
            assert submitter.nc is not None
            await wait_stream_current(observer)

            async def pick() -> int:
                if victim == "stream-leader":
                    return await stream_leader(observer, cluster)
                return connected_node(stack.gateway.nc if victim == "gateway-node" else submitter.nc, cluster)  # type: ignore[arg-type]

            killed: list[int] = []

            async def kill(node: int | None = None) -> None:
                node = await pick() if node is None else node
                await asyncio.to_thread(cluster.nodes[node].kill_blocking)
                lost_at.append(time.time())
                killed.append(node)

            if victim == "stream-leader":
                # 500 creates: the leader is lost at 30 %; at 70 % it is back, caught up, and another node is lost.
                async def restart_and_kill_another() -> None:
                    await asyncio.to_thread(cluster.nodes[killed[0]].restart_blocking)
                    await wait_stream_current(observer)
                    await kill(await lead_elsewhere(observer, cluster, killed[0]))

                creates = load.run(500, 16, {150: kill, 350: restart_and_kill_another})
                finals = await load.final_times(creates, within=RECOVERY_S * 2)
                assert len(killed) == 2
            else:
                finals = await load.final_times(load.run(100, 16, {30: kill}), within=RECOVERY_S * 2)
            assert_each_ran_once_and_finished(load, finals, lost_at)
    finally:
        await observer.close()


@pytest.mark.cluster
async def test_discovery_and_announcements_survive_a_node_loss(cluster: NatsCluster, tmp_path: Path) -> None:
    """$SRV discovery and the pools' announcements reach a listener on another node after a node's loss."""
    async with cluster_stack(cluster, tmp_path) as (_stack, submitter, load):
        assert submitter.nc is not None
        victim = connected_node(submitter.nc, cluster)
        listener_node = (victim + 1) % 3
        listener = await nats.connect(cluster.nodes[listener_node].url)
        try:
            reports: asyncio.Queue[pb.ResourceReport] = asyncio.Queue()

            async def on_report(msg: Any) -> None:
                reports.put_nowait(pb.ResourceReport.parse(msg.data))

            await listener.subscribe(resources_subject(load.pool), cb=on_report)
            await asyncio.to_thread(cluster.nodes[victim].kill_blocking)
            lost = time.monotonic()
            deadline = lost + RECOVERY_S
            while not submitter.nc.is_connected or connected_node(submitter.nc, cluster) == victim:
                assert time.monotonic() < deadline, "submitter did not fail over"
                await asyncio.sleep(0.1)
            await submitter.announce()
            report = await asyncio.wait_for(reports.get(), RECOVERY_S)
            assert report.pool == load.pool
            assert load.pool in await discover_pools(listener, SERVICE_NAME)
            reply = await submitter_client(listener, load.pool).describe(pb.DescribeRequest(), timeout=10)
            assert reply.build_config is not None
        finally:
            await listener.close()
