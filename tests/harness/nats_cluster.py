"""A real nats-server JetStream cluster on loopback for the ``test_cluster*`` tests, and waiting on its state.

``running_cluster`` starts N nodes on free ports (the ``cluster`` fixture, 3 nodes, is imported by name by the
test modules); the helpers wait until JetStream has its meta leader and peers, find a stream's leader, and wait
until a stream's replicas are current.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import nats
import nats.errors
import nats.js.errors
import pytest
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.services.ops.nats_server import NatsCluster, nats_server_binary
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

# --- the cluster and its helpers -------------------------------------------------------------------------


async def wait_jetstream(nc: NATS, within: float = 30.0, peers: int = 1) -> None:
    """Until the cluster has elected its JetStream meta leader and knows ``peers`` JetStream nodes
    (before that, API calls time out and an R3 stream finds "no suitable peers for placement")."""
    js = nc.jetstream(timeout=1)
    deadline = time.monotonic() + within
    while True:
        try:
            await js.account_info()
            if peers > 1:
                await js.add_stream(StreamConfig(name="PLACEMENT_PROBE", subjects=["probe.x"], num_replicas=peers))
                await js.delete_stream("PLACEMENT_PROBE")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def running_cluster(size: int) -> AsyncIterator[NatsCluster]:
    try:
        nats_server_binary()
    except Exception:
        from conftest import missing_service

        missing_service("nats-server")
    nodes = await NatsCluster(size=size).start()
    try:
        nc = await nats.connect(nodes.urls)
        await wait_jetstream(nc, peers=size)
        await nc.close()
        yield nodes
    finally:
        await nodes.stop()


@pytest.fixture
async def cluster() -> AsyncIterator[NatsCluster]:
    async with running_cluster(3) as nodes:
        yield nodes


async def stream_leader(nc: NATS, cluster: NatsCluster) -> int:
    info = await nc.jetstream(timeout=5).stream_info(EVENTS_STREAM)
    assert info.cluster is not None and info.cluster.leader, info.cluster
    return int(info.cluster.leader.removeprefix("n"))


async def lead_elsewhere(nc: NATS, cluster: NatsCluster, node: int, within: float = 30.0) -> int:
    """The stream's leader once it is not ``node``: a restarted node may win an election again (an election
    after a missed heartbeat on a loaded machine), and is then asked to step down (``$JS.API.STREAM.LEADER.
    STEPDOWN``, as ``nats stream cluster step-down`` does)."""
    deadline = time.monotonic() + within
    while (leader := await stream_leader(nc, cluster)) == node:
        assert time.monotonic() < deadline, f"node {node} kept the events stream's leadership"
        with contextlib.suppress(nats.errors.TimeoutError):
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{EVENTS_STREAM}", b"", timeout=5)
        await wait_stream_current(nc)
    return leader


async def wait_stream_current(nc: NATS, within: float = 30.0) -> None:
    """Until the stream has a leader and every replica is current (a restarted node caught up)."""
    js = nc.jetstream(timeout=2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            info = await js.stream_info(EVENTS_STREAM)
            peers = (info.cluster.replicas or []) if info.cluster else []
            if info.cluster and info.cluster.leader and len(peers) == 2 and all(p.current for p in peers):
                return
        await asyncio.sleep(0.2)
    raise AssertionError("events stream did not become current on all 3 nodes")


def connected_node(nc: NATS, cluster: NatsCluster) -> int:
    url = nc.connected_url
    assert url is not None and url.port is not None
    return cluster.node_of_port(url.port)
