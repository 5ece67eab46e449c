"""The real submitter on a secured NATS: wss:// (TLS), nkey auth, per-pool permissions, private inbox."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats.js.errors
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.nats_connection import backoff_delay, connect_options
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.edge.natsconn import connection_settings
from interlink_nats.submitters.runtime import Submitter, SubmitterError
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from tls import SecureStack, stack_fixture

# nats-py hands aiohttp a float connect timeout for wss://; under pyproject's "warnings are errors"
# that would fail every WebSocket connect (production only sees a warning).
pytestmark = pytest.mark.filterwarnings("ignore:parameter 'timeout' of type 'float' is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("submitter-wss"))


@pytest.mark.parametrize("scheme", ["wss", "tls"])
async def test_a_pool_credential_over_tls_serves_jobs_and_publishes_events(
    stack: SecureStack, tmp_path: Path, caplog: pytest.LogCaptureFixture, scheme: str
) -> None:
    gateway = await stack.connect("gateway")
    try:
        await ensure_events_stream(gateway.jetstream())
        url = stack.wss_url if scheme == "wss" else stack.tls_url
        settings = settings_for(
            tmp_path / "state",
            url,
            pool="a",
            nats_nkey_seed_file=stack.written.seed_files["pool-a"],
            tls_ca_file=stack.tls.ca_cert,
        )
        caplog.set_level(logging.WARNING)
        async with Submitter(settings) as sub:
            assert sub.nc is not None
            assert sub.nc.connected_url is not None
            assert sub.nc.connected_url.scheme == scheme
            client = submitter_client(gateway, "a", timeout=10)
            u = str(uuid.uuid4())
            await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "echo hi"})))

            async def succeeded_and_published() -> bool:
                st = (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]
                return st.state == pb.JobState.SUCCEEDED and sub.unpublished == 0

            await wait_for(succeeded_and_published, what="the job to succeed and its events to be acked")
            assert (await client.describe(pb.DescribeRequest())).pool == "a"
        assert "permissions violation" not in caplog.text.lower()
    finally:
        await gateway.close()


def test_connect_options_carry_auth_tls_and_the_private_inbox(tmp_path: Path) -> None:
    seed = tmp_path / "pool.nk"
    seed.write_text("SUA...")
    settings = settings_for(
        tmp_path,
        ["tls://n1:4222", "wss://edge.example/nats"],
        pool="site-a",
        nats_user="u",
        nats_password="p",
        nats_token="t",
        nats_nkey_seed_file=seed,
    )
    opts = connect_options(connection_settings(settings), name="x")
    assert opts["servers"] == ["tls://n1:4222", "wss://edge.example/nats"]
    assert opts["max_reconnect_attempts"] == -1
    assert opts["inbox_prefix"] == "_INBOX.pool.site-a"
    assert (opts["user"], opts["password"], opts["token"]) == ("u", "p", "t")
    assert opts["nkeys_seed"] == str(seed)
    assert opts["tls"] is not None
    plain = connect_options(connection_settings(settings_for(tmp_path, "nats://h:4222")), name="x")
    assert "tls" not in plain
    assert "user" not in plain


def test_reconnect_back_off_grows_and_is_capped() -> None:
    early = [backoff_delay(0, cap=30) for _ in range(200)]
    late = [backoff_delay(20, cap=30) for _ in range(200)]
    assert max(early) <= 0.5
    assert max(late) <= 30
    assert sum(late) / len(late) > 10 * sum(early) / len(early)


async def test_a_submitter_with_another_pools_credential_fails_naming_subject_and_identity(
    stack: SecureStack, tmp_path: Path
) -> None:
    """Pool ``a`` started with pool ``b``'s nkey: its RPC subscription is refused, so it must not serve on."""
    settings = settings_for(
        tmp_path / "state",
        stack.tls_url,
        pool="a",
        nats_nkey_seed_file=stack.written.seed_files["pool-b"],
        nats_inbox_prefix="_INBOX.pool.b",
        tls_ca_file=stack.tls.ca_cert,
    )
    submitter = Submitter(settings)
    with pytest.raises(SubmitterError) as failure:
        await submitter.start()
    assert submitter.permission_errors, "the health check's permission list is fed by the same callback"
    message = str(failure.value)
    assert "interlink_nats.v1.SubmitterService.Submit.a" in message  # as subscribed: nats-py lower-cases -ERR
    assert stack.cred("pool-b").public_key in message


async def test_a_submitter_started_before_the_gateway_never_tries_to_create_the_stream(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No stream yet: the pool only looks it up (no violation, no stall); events flow once the gateway made it."""
    with contextlib.contextmanager(stack_fixture)(tmp_path_factory.mktemp("no-stream")) as fresh:
        settings = settings_for(
            tmp_path / "state",
            fresh.tls_url,
            pool="a",
            nats_nkey_seed_file=fresh.written.seed_files["pool-a"],
            tls_ca_file=fresh.tls.ca_cert,
        )
        caplog.set_level(logging.INFO)
        gateway = await fresh.connect("gateway")
        try:
            async with Submitter(settings) as sub:
                assert "permissions violation" not in caplog.text.lower()
                with pytest.raises(nats.js.errors.NotFoundError):
                    await gateway.jetstream().stream_info(EVENTS_STREAM)
                client = submitter_client(gateway, "a", timeout=10)
                u = str(uuid.uuid4())
                await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "true"})))
                await wait_for(lambda: _done(client, u), what="the job to finish while its events wait for the stream")
                assert sub.unpublished > 0
                await ensure_events_stream(gateway.jetstream())
                await wait_for(lambda: _zero(sub.unpublished), what="pending events published once the stream exists")
            assert "permissions violation" not in caplog.text.lower()
        finally:
            await gateway.close()


async def _done(client: pb.SubmitterServiceStub, uid: str) -> bool:
    status = (await client.get_status(pb.GetStatusRequest(pod_uids=[uid]))).statuses[0]
    return status.state == pb.JobState.SUCCEEDED


async def _zero(value: int) -> bool:
    return value == 0
