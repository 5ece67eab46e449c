"""interlink-nats on a 3-node NATS JetStream cluster: nodes are lost (``kill -9``) under load.

Real nats-servers on free loopback ports, a real gateway and a real shell submitter in this
process, pods whose one container appends its pod UID to a shared file (so "ran exactly once" is
checked by counting lines). A status must reach its final state through the events stream, within
30 s of the node's loss — the 300 s stale-status sweep is far away and never the one that helps.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
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
from interlink_nats.services.bus.events_stream import desired_replicas, ensure_events_stream
from interlink_nats.services.bus.rpc import SERVICE_NAME, submitter_client
from interlink_nats.services.gateway.pools import discover_pools
from interlink_nats.services.ops.nats_server import NatsCluster, NatsServerProcess, nats_server_binary
from interlink_nats.submitters.runtime import Submitter
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig
from stack import Stack, create_body, gateway_only, new_pool, pod, submitter_settings, terminated

RECOVERY_S = 30.0
"""A pod's status must be final this long after the node's loss (or after its own create)."""


# --- pure: which replica count ---------------------------------------------------------------------------


def test_replicas_are_one_on_a_single_server_and_three_on_a_cluster() -> None:
    assert desired_replicas(None, {}) == 1
    assert desired_replicas(None, {"cluster": ""}) == 1
    assert desired_replicas(None, {"cluster": "c", "connect_urls": ["a:1", "b:1"]}) == 3
    assert desired_replicas(None, {"cluster": "c"}) == 3
    assert desired_replicas(5, {"cluster": "c", "connect_urls": ["a:1"]}) == 5
    assert desired_replicas(2, {}) == 2


@pytest.mark.cluster
async def test_a_two_node_cluster_gets_two_replicas() -> None:
    """Asking 3 of a 2-node cluster is refused; creation steps down to the cluster's size."""
    async with running_cluster(2) as nodes:
        nc = await nats.connect(nodes.urls)
        try:
            state = await ensure_events_stream(nc.jetstream(timeout=5), server_info=nc._server_info)
            assert (state.replicas, state.wanted, state.created) == (2, 3, True)
        finally:
            await nc.close()


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

    async def final_times(self, within: float) -> dict[str, float]:
        """When each pod's /status first showed every container terminated."""
        done: dict[str, float] = {}
        deadline = time.monotonic() + within
        while len(done) < len(self.pods) and time.monotonic() < deadline:
            todo = [p for p in self.pods if p["metadata"]["uid"] not in done]
            response = await self.stack.get("/status", todo)
            assert response.status_code == 200, response.text
            now = time.time()
            for status in response.json():
                if status["containers"] and terminated(status):
                    done[status["UID"]] = now
            await asyncio.sleep(0.25)
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

            async def kill() -> None:
                node = await pick()
                await asyncio.to_thread(cluster.nodes[node].kill_blocking)
                lost_at.append(time.time())
                killed.append(node)

            if victim == "stream-leader":
                # 500 creates: the leader is lost at 30 %; at 70 % it is back, caught up, and another node is lost.
                async def restart_and_kill_another() -> None:
                    await asyncio.to_thread(cluster.nodes[killed[0]].restart_blocking)
                    await wait_stream_current(observer)
                    await kill()
                    assert killed[1] != killed[0]

                await load.run(500, 16, {150: kill, 350: restart_and_kill_another})
                assert len(killed) == 2
            else:
                await load.run(100, 16, {30: kill})
            finals = await load.final_times(within=RECOVERY_S * 2)
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


# --- generated per-node configurations ------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.cluster
async def test_nats_config_cluster_writes_nodes_that_validate_and_form_a_secure_cluster(tmp_path: Path) -> None:
    """`nats-config --cluster 3`: each node's config passes `nats-server -t`, the nodes form a cluster over
    mutual-TLS routes, and the generated identities hold on it (gateway on node 0, pool on node 2)."""
    pytest.importorskip("cryptography")
    import typer
    from interlink_nats.kernel.nats_connection import credential_options
    from interlink_nats.services.security.cli import nats_config
    from typer.testing import CliRunner

    app = typer.Typer()
    app.command()(nats_config)
    out = tmp_path / "nats"
    peers = ",".join(f"127.0.0.1:{free_port()}" for _ in range(3))
    result = CliRunner().invoke(
        app,
        [
            "--pools=a,b",
            f"--out={out}",
            "--host=127.0.0.1",
            "--client-port=-1",
            "--websocket-port=-1",
            f"--jetstream-store-dir={tmp_path / 'js'}",
            "--dev-tls=127.0.0.1,localhost",
            "--cluster=3",
            f"--cluster-peers={peers}",
        ],
    )
    assert result.exit_code == 0, result.output
    configs = [out / f"nats-server-{i}.conf" for i in range(3)]
    for config in configs:
        text = config.read_text()
        assert "cluster {" in text and "verify: true" in text and "websocket {" in text and "INTERLINK" in text
        command = [nats_server_binary(), "-t", "-c", str(config)]
        check = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    nodes = await NatsCluster(config_files=configs).start()
    try:
        ca = out / "tls" / "ca.pem"

        async def connect_as(name: str, node: int, inbox: str) -> NATS:
            opts = credential_options(seed_file=out / "credentials" / f"{name}.nk", inbox=inbox, ca_file=ca)
            return await nats.connect(nodes.nodes[node].url.replace("nats://", "tls://"), **opts)

        gateway = await connect_as("gateway", 0, "_INBOX.gateway")
        pool = await connect_as("pool-a", 2, "_INBOX.pool.a")
        try:
            await wait_jetstream(gateway)
            js = gateway.jetstream(timeout=2)
            deadline = time.monotonic() + 30
            while True:  # the cluster may still be meeting its peers: placing 3 replicas waits for that
                try:
                    state = await ensure_events_stream(js, replicas=3, server_info=gateway._server_info)
                    break
                except Exception:
                    assert time.monotonic() < deadline, "the gateway could not create an R3 stream"
                    await asyncio.sleep(0.2)
            assert state.replicas == 3
            deadline = time.monotonic() + 30
            while True:  # the new stream's interest reaches node 2 over the route an instant later
                try:
                    ack = await pool.jetstream(timeout=5).publish("interlink.events.a", b"x")
                    break
                except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
                    assert time.monotonic() < deadline, "pool a could not publish to the stream from node 2"
                    await asyncio.sleep(0.2)
            assert ack.stream == EVENTS_STREAM
        finally:
            await gateway.close()
            await pool.close()
    finally:
        await nodes.stop()


# --- pure: per-node configuration -------------------------------------------------------------------------


def test_cluster_options_name_every_node_and_refuse_inconsistent_input() -> None:
    from interlink_nats.services.security import NatsConfigOptions, build_bundle

    options = NatsConfigOptions(pools=("a",), cluster_size=3, client_port=4222, port_stride=10)
    bundle = build_bundle(options)
    assert len(bundle.node_configs) == 3
    for i, text in enumerate(bundle.node_configs):
        assert f'server_name: "interlink-nats-{i}"' in text
        assert f'listen: "0.0.0.0:{4222 + 10 * i}"' in text
        assert f'store_dir: "/data/jetstream/interlink-nats-{i}"' in text
        routes = {f'"nats-route://interlink-nats-{j}:6222"' for j in range(3) if j != i}
        assert all(route in text for route in routes) and f'interlink-nats-{i}:6222"\n' not in text
        # The security model is the same on every node: users and permissions are identical.
        assert text.split("accounts {")[1] == bundle.node_configs[0].split("accounts {")[1]
    assert build_bundle(NatsConfigOptions(pools=("a",))).node_configs == ()
    with pytest.raises(ValueError, match="--cluster-peers names 2 nodes"):
        NatsConfigOptions(pools=("a",), cluster_size=3, cluster_peers=("h0:6222", "h1:6222"))
    with pytest.raises(ValueError, match="not host:port"):
        NatsConfigOptions(pools=("a",), cluster_size=2, cluster_peers=("h0:6222", "h1"))
    with pytest.raises(ValueError, match="--tls-ca"):
        NatsConfigOptions(pools=("a",), cluster_size=3, tls_cert="c.pem", tls_key="k.pem")


# --- requests lost with a node are sent again -------------------------------------------------------------


async def test_a_call_is_sent_again_when_its_connection_fails_over(fresh_nats_server: NatsServerProcess) -> None:
    """The caller's server is lost while a call waits: the reply went with it, so the call is sent again
    after the reconnect instead of waiting out its deadline (every unary SubmitterService method is
    idempotent). The server here answers only the second copy."""
    from grpclib.const import Status
    from interlink_nats.services.bus.rpc.channel import NatsChannel
    from interlink_nats.services.bus.rpc.protocol import status_headers

    pool = new_pool()
    url = fresh_nats_server.url
    server = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    client = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    seen: list[bytes] = []
    first_arrived = asyncio.Event()

    async def answer_only_the_second(msg: Any) -> None:
        seen.append(msg.data)
        if len(seen) == 1:
            first_arrived.set()
            return
        await server.publish(msg.reply, bytes(pb.DescribeResponse(pool=pool)), headers=status_headers(Status.OK))

    try:
        subject = NatsChannel(client, pool).subject("/interlink_nats.v1.SubmitterService/Describe")
        await server.subscribe(subject, cb=answer_only_the_second)
        await server.flush()
        call = asyncio.create_task(submitter_client(client, pool).describe(pb.DescribeRequest(), timeout=120))
        await asyncio.wait_for(first_arrived.wait(), 10)
        await asyncio.to_thread(fresh_nats_server.restart_blocking)
        reply = await asyncio.wait_for(call, 60)
        assert reply.pool == pool
        assert len(seen) == 2 and seen[0] == seen[1]
    finally:
        await server.close()
        await client.close()


@pytest.mark.cluster
async def test_an_existing_single_replica_stream_and_consumer_are_scaled_up(
    cluster: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream made on one server (R1) before the cluster: the gateway says so and scales it to 3."""
    from interlink_nats.services.bus.events_stream import events_stream_config
    from nats.js.api import ConsumerConfig

    nc = await nats.connect(cluster.urls)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(events_stream_config(replicas=1))
        await js.add_consumer(EVENTS_STREAM, ConsumerConfig(durable_name="old-gateway", num_replicas=1))
        async with gateway_only(cluster.url, default_pool=None, durable="old-gateway") as stack:
            assert stack.gateway.events.stream is not None
            assert stack.gateway.events.stream.updated
            assert (await js.stream_info(EVENTS_STREAM)).config.num_replicas == 3
            assert (await js.consumer_info(EVENTS_STREAM, "old-gateway")).config.num_replicas == 3
        assert "has 1 replica(s) but 3 are wanted" in caplog.text
    finally:
        await nc.close()
