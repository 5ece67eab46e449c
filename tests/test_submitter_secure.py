"""The real submitter on a secured NATS: wss:// (TLS), nkey auth, per-pool permissions, private inbox."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.events import ensure_events_stream
from interlink_nats.services.rpc import submitter_client
from interlink_nats.submitters.natsconn import backoff_delay, connect_options
from interlink_nats.submitters.runtime import Submitter
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
        assert "Permissions Violation" not in caplog.text
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
    opts = connect_options(settings, name="x")
    assert opts["servers"] == ["tls://n1:4222", "wss://edge.example/nats"]
    assert opts["max_reconnect_attempts"] == -1
    assert opts["inbox_prefix"] == "_INBOX.pool.site-a"
    assert (opts["user"], opts["password"], opts["token"]) == ("u", "p", "t")
    assert opts["nkeys_seed"] == str(seed)
    assert opts["tls"] is not None
    plain = connect_options(settings_for(tmp_path, "nats://h:4222"), name="x")
    assert "tls" not in plain
    assert "user" not in plain


def test_reconnect_back_off_grows_and_is_capped() -> None:
    early = [backoff_delay(0, cap=30) for _ in range(200)]
    late = [backoff_delay(20, cap=30) for _ in range(200)]
    assert max(early) <= 0.5
    assert max(late) <= 30
    assert sum(late) / len(late) > 10 * sum(early) / len(early)
