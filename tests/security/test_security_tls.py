"""Sites dial out over TLS WebSockets: ``wss://`` with the site's CA file, end to end through a pool credential.

The pool's submitter side (a ``SubmitterServiceBase`` served by ``services.bus.rpc``) connects over
``wss://`` exactly as a remote site would; the gateway calls it (unary and server-streaming).
A client that trusts another CA, or only the system store, is refused by its own TLS check.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import nats
import nats.errors
import pytest
from fake_submitter import FakeSubmitter, settle
from interlink_nats.gen.interlink_nats.v1 import DescribeRequest, GetLogsRequest
from interlink_nats.services.bus.rpc import RpcServer, submitter_client
from nats.aio.transport import WebSocketTransport
from tls import ErrorLog, SecureStack, stack_fixture, write_other_ca

pytestmark = [
    pytest.mark.timeout(60),
    # nats-py 2.16's WebSocket transport passes a float timeout that aiohttp deprecates; as an
    # error (pyproject's filterwarnings) it would make every wss:// connect fail and retry forever.
    pytest.mark.filterwarnings("ignore:parameter 'timeout' of type 'float' is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("wss"))


@pytest.fixture
async def clients(stack: SecureStack) -> AsyncIterator[SecureStack]:
    yield stack
    await stack.close_clients()


def test_listeners_are_tls_only(stack: SecureStack) -> None:
    assert stack.server.websocket_url is not None
    assert stack.server.websocket_url.startswith("wss://")
    assert "tls" in stack.bundle.config_text
    assert "no_tls" not in stack.bundle.config_text


async def test_pool_over_wss_serves_the_gateway(clients: SecureStack) -> None:
    pool_errors = ErrorLog()
    pool_nc = await clients.connect("pool-a", url=clients.wss_url, errors=pool_errors)
    assert pool_nc.connected_url is not None
    assert pool_nc.connected_url.scheme == "wss"
    server = RpcServer(pool_nc, [FakeSubmitter("a")], pool="a", stream_window=4)
    await server.start()
    await settle(pool_nc)

    gateway = await clients.connect("gateway", url=clients.wss_url)
    stub = submitter_client(gateway, "a", timeout=5)
    assert (await stub.describe(DescribeRequest())).pool == "a"
    chunks = [c async for c in stub.get_logs(GetLogsRequest(pod_uid="x"))]
    assert [c.offset for c in chunks] == list(range(1, 101))
    assert pool_errors.violations() == []
    await server.stop(grace_s=0)


@pytest.mark.parametrize("scheme", ["wss", "tls"])
async def test_wrong_ca_is_refused(clients: SecureStack, tmp_path: Path, scheme: str) -> None:
    other_ca = write_other_ca(tmp_path / "other-ca.pem")
    url = clients.wss_url if scheme == "wss" else clients.tls_url
    failures = await attempt_connect(url, clients.connect_options("pool-a", ca_file=other_ca))
    assert any(_is_cert_failure(f) for f in failures), failures


async def test_system_trust_store_does_not_trust_the_site_ca(clients: SecureStack) -> None:
    opts = clients.connect_options("pool-a")
    opts["tls"] = ssl.create_default_context()
    failures = await attempt_connect(clients.wss_url, opts)
    assert any(_is_cert_failure(f) for f in failures), failures


async def attempt_connect(url: str, opts: dict[str, Any]) -> list[BaseException]:
    """Try to connect once; return what went wrong (raised or reported), failing the test if it connected.

    nats-py keeps retrying a failing ``wss://`` server even with reconnects off, so the attempt
    is bounded by a timeout and the TLS error is taken from the error callback. Each retry builds
    a WebSocket transport whose aiohttp session nats-py never closes; they are tracked and closed
    here, or their finalizers would warn in whatever test the garbage collector runs next.
    """
    reported: list[BaseException] = []
    transports: list[WebSocketTransport] = []

    class TrackedTransport(WebSocketTransport):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            transports.append(self)

    async def on_error(exc: Exception) -> None:
        reported.append(exc)

    with mock.patch("nats.aio.client.WebSocketTransport", TrackedTransport):
        try:
            async with asyncio.timeout(3):
                nc = await nats.connect(
                    url, error_cb=on_error, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2, **opts
                )
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            return [*reported, exc]
        finally:
            for transport in transports:
                if transport._client is not None and not transport._client.closed:
                    await transport._client.close()
    await nc.close()
    pytest.fail(f"connected to {url} although the server's certificate should not verify")


def _is_cert_failure(exc: BaseException) -> bool:
    """Walk the cause chain: aiohttp wraps the SSL error for wss://, nats-py may wrap it for tls://."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
