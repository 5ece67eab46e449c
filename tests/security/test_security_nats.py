"""Per-identity permissions against a real nats-server started from the generated configuration.

Every denial is *observed*: the server's ``-ERR 'Permissions Violation ...'`` must reach the
client's error callback; nothing is inferred from a missing message. Connections use
``tls://`` with the test CA, so TLS on the client port is exercised by every test here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from fake_submitter import FakeSubmitter, settle
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats.v1 import (
    DescribeRequest,
    GetLogsRequest,
    ResourceReport,
)
from interlink_nats.kernel import subjects
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import RpcServer, submitter_client
from tls import ErrorLog, SecureStack, stack_fixture

pytestmark = pytest.mark.timeout(60)

RPC = subjects.SUBMITTER_SERVICE


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("secure"))


@pytest.fixture
async def clients(stack: SecureStack) -> AsyncIterator[SecureStack]:
    yield stack
    await stack.close_clients()


async def serve_pool(stack: SecureStack, pool: str) -> tuple[RpcServer, ErrorLog]:
    errors = ErrorLog()
    nc = await stack.connect(f"pool-{pool}", errors=errors)
    server = RpcServer(nc, [FakeSubmitter(pool)], pool=pool, stream_window=8)
    await server.start()
    await settle(nc)
    return server, errors


# --- pools ---------------------------------------------------------------------------------------


async def test_pool_cannot_receive_other_pools_rpcs(clients: SecureStack) -> None:
    errors = ErrorLog()
    nc = await clients.connect("pool-a", errors=errors)
    for subject in (f"{RPC}.Submit.b", f"{RPC}.*.b", f"{RPC}.>", "interlink_nats.>", ">"):
        await nc.subscribe(subject)
        await nc.flush()
        await errors.wait_violation("subscription", subject)


async def test_pool_cannot_read_other_inboxes_or_events(clients: SecureStack) -> None:
    errors = ErrorLog()
    nc = await clients.connect("pool-a", errors=errors)
    for subject in ("_INBOX.>", "_INBOX.gateway.>", "_INBOX.pool.b.>", "interlink.events.*", "interlink.config.b"):
        await nc.subscribe(subject)
        await nc.flush()
        await errors.wait_violation("subscription", subject)


async def test_pool_cannot_impersonate_another_pool(clients: SecureStack) -> None:
    errors = ErrorLog()
    nc = await clients.connect("pool-a", errors=errors)
    for subject in ("interlink.events.b", "interlink.config.b", "interlink.resources.b"):
        await nc.publish(subject, b"forged")
        await nc.flush()
        await errors.wait_violation("publish", subject)


async def test_pool_cannot_call_rpcs_or_forge_replies_or_admin_jetstream(clients: SecureStack) -> None:
    errors = ErrorLog()
    nc = await clients.connect("pool-a", errors=errors)
    for subject in (
        f"{RPC}.Submit.b",
        f"{RPC}.Describe.b",
        f"{RPC}.Submit.a",  # not even its own: only the gateway sends work
        "_INBOX.gateway.abc",  # a reply nobody asked it for
        "$SRV.PING",
        f"$JS.API.STREAM.CREATE.{subjects.EVENTS_STREAM}",
        f"$JS.API.STREAM.DELETE.{subjects.EVENTS_STREAM}",
        f"$JS.API.CONSUMER.CREATE.{subjects.EVENTS_STREAM}",
    ):
        await nc.publish(subject, b"")
        await nc.flush()
        await errors.wait_violation("publish", subject)


async def test_pool_does_its_job(clients: SecureStack) -> None:
    """Own RPCs served, replies allowed, own events acked by JetStream, announcements seen by the controller."""
    gw = await clients.connect("gateway")
    await ensure_events_stream(gw.jetstream())
    _server, pool_errors = await serve_pool(clients, "a")

    reply = await submitter_client(gw, "a", timeout=5).describe(DescribeRequest())
    assert reply.pool == "a"

    ctl = await clients.connect("controller")
    seen = await ctl.subscribe("interlink.resources.*")
    await settle(ctl)
    pool_nc = _server.nc
    await pool_nc.publish("interlink.resources.a", bytes(ResourceReport(pool="a")))
    await pool_nc.publish("interlink.config.a", b"")
    msg = await seen.next_msg(timeout=3)
    assert msg.subject == "interlink.resources.a"

    ack = await pool_nc.jetstream().publish("interlink.events.a", b"event")
    assert ack.stream == subjects.EVENTS_STREAM
    await pool_nc.flush()
    assert pool_errors.violations() == []
    await _server.stop(grace_s=0)


async def test_server_streaming_reply_with_credit_through_pool_permissions(clients: SecureStack) -> None:
    """GetLogs sends 100 chunks with window 8: the pool's replies and the gateway's acks must both pass."""
    gw_errors = ErrorLog()
    gw = await clients.connect("gateway", errors=gw_errors)
    server, pool_errors = await serve_pool(clients, "a")
    chunks = [c async for c in submitter_client(gw, "a", timeout=10).get_logs(GetLogsRequest(pod_uid="p"))]
    assert len(chunks) == 100
    assert chunks[-1].offset == 100
    assert pool_errors.violations() == []
    assert gw_errors.violations() == []
    await server.stop(grace_s=0)


async def test_micro_discovery_answered_by_pools(clients: SecureStack) -> None:
    server, pool_errors = await serve_pool(clients, "b")
    gw = await clients.connect("gateway")
    msg = await gw.request("$SRV.PING.interlink-submitter", b"", timeout=3)
    assert b'"pool": "b"' in msg.data or b'"pool":"b"' in msg.data
    assert pool_errors.violations() == []
    await server.stop(grace_s=0)


# --- gateway -------------------------------------------------------------------------------------


async def test_gateway_calls_every_pool_and_consumes_events(clients: SecureStack) -> None:
    gw_errors = ErrorLog()
    gw = await clients.connect("gateway", errors=gw_errors)
    js = gw.jetstream()
    await ensure_events_stream(js)
    servers = [(await serve_pool(clients, p))[0] for p in ("a", "b")]
    for pool in ("a", "b"):
        assert (await submitter_client(gw, pool, timeout=5).describe(DescribeRequest())).pool == pool

    await servers[1].nc.jetstream().publish("interlink.events.b", b"state")
    sub = await js.pull_subscribe("interlink.events.*", durable="security-test", stream=subjects.EVENTS_STREAM)
    msgs = await sub.fetch(1, timeout=3)
    assert msgs
    assert msgs[0].subject.startswith("interlink.events.")
    for m in msgs:
        await m.ack()
    await gw.flush()
    assert gw_errors.violations() == []
    for server in servers:
        await server.stop(grace_s=0)


async def test_gateway_cannot_impersonate_pools_or_snoop_jobs(clients: SecureStack) -> None:
    errors = ErrorLog()
    gw = await clients.connect("gateway", errors=errors)
    for subject in (
        "interlink.events.a",
        "interlink.config.a",
        "interlink.resources.a",
        f"$JS.API.STREAM.DELETE.{subjects.EVENTS_STREAM}",
    ):
        await gw.publish(subject, b"")
        await gw.flush()
        await errors.wait_violation("publish", subject)
    for subject in (f"{RPC}.Submit.a", "_INBOX.pool.a.>", "_INBOX.>"):
        await gw.subscribe(subject)
        await gw.flush()
        await errors.wait_violation("subscription", subject)


# --- controller ----------------------------------------------------------------------------------


async def test_controller_may_only_describe(clients: SecureStack) -> None:
    errors = ErrorLog()
    ctl = await clients.connect("controller", errors=errors)
    server, _ = await serve_pool(clients, "a")
    stub = submitter_client(ctl, "a", timeout=5)
    assert (await stub.describe(DescribeRequest())).pool == "a"
    assert errors.violations() == []

    with pytest.raises(GRPCError) as info:
        await submitter_client(ctl, "a", timeout=1).get_logs(GetLogsRequest()).__anext__()
    assert info.value.status in (Status.DEADLINE_EXCEEDED, Status.UNAVAILABLE)
    await errors.wait_violation("publish", f"{RPC}.GetLogs.a")
    for subject in (f"{RPC}.Submit.b", "interlink.resources.a", "interlink.events.a"):
        await ctl.publish(subject, b"")
        await ctl.flush()
        await errors.wait_violation("publish", subject)
    for subject in ("interlink.events.*", f"{RPC}.Describe.a", "_INBOX.gateway.>"):
        await ctl.subscribe(subject)
        await ctl.flush()
        await errors.wait_violation("subscription", subject)
    await server.stop(grace_s=0)


# --- authentication and rotation -----------------------------------------------------------------


async def test_unknown_nkey_is_refused(clients: SecureStack, tmp_path: Path) -> None:
    from interlink_nats.services.security.bundle import new_user_seed

    stranger = tmp_path / "stranger.nk"
    stranger.write_text(new_user_seed() + "\n")
    stranger.chmod(0o600)
    opts = clients.connect_options("pool-a")
    opts["nkeys_seed"] = str(stranger)
    with pytest.raises((nats.errors.Error, OSError)):
        await nats.connect(clients.tls_url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **opts)


async def test_rotating_a_pool_revokes_its_old_seed(tmp_path: Path) -> None:
    """docs/security.md's rotation procedure: regenerate with --rotate, reload, old seed refused."""
    for stack in stack_fixture(tmp_path, pools=("a",)):
        old_seed = stack.written.seed_files["pool-a"].read_text()
        nc = await stack.connect("pool-a")
        await nc.close()
        stack.regenerate(rotate=("a",))
        assert stack.written.seed_files["pool-a"].read_text() != old_seed
        old = tmp_path / "old.nk"
        old.write_text(old_seed)
        opts = stack.connect_options("pool-a")
        opts["nkeys_seed"] = str(old)
        refused = False
        for _ in range(50):  # the reload is asynchronous: wait until the server applied it
            try:
                probe = await nats.connect(
                    stack.tls_url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **opts
                )
                await probe.close()
                await asyncio.sleep(0.1)
            except (nats.errors.Error, OSError):  # an auth error, or the server hanging up mid-handshake
                refused = True
                break
        assert refused, "the rotated-out seed still connects after reload"
        new = await stack.connect("pool-a")  # the new seed works
        assert new.is_connected
        gw = await stack.connect("gateway")  # other identities were untouched
        assert gw.is_connected
        await stack.close_clients()
