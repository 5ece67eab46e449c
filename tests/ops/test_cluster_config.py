"""interlink-nats's configuration for a NATS cluster: replica counts, per-node configs, failover of calls.

Which replica count the events stream gets (pure, and on a real 2-node cluster), an existing single-replica
stream scaled up, ``nats-config --cluster`` nodes that validate and form a secure cluster, and a call sent again
when its connection fails over to another server.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.services.bus.events_stream import desired_replicas, ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.ops.nats_server import NatsCluster, NatsServerProcess, nats_server_binary
from nats.aio.client import Client as NATS
from nats_cluster import cluster as cluster
from nats_cluster import running_cluster, wait_jetstream
from stack import gateway_only, new_pool

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
