"""A pod end to end under the generated per-pool NATS security: the site dials in over ``wss://``.

nats-server runs the configuration written by ``interlink-nats nats-config`` (nkeys, subject
permissions, TLS listeners with a test CA); the submitter connects with the pool's credential over
``wss://``, the gateway with its own over ``tls://``; interLink's calls go through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from interlink_nats.services.gateway.settings import GatewayNatsSettings
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings
from stack import create_body, eventually, gateway_only, logs_body, pod, terminated
from tls import SecureStack, stack_fixture

POOL = "site-a"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("secure-e2e"), pools=(POOL, "site-b"))


async def test_a_pod_runs_end_to_end_with_the_site_on_wss(secure: SecureStack, tmp_path: Path) -> None:
    pool_cred = secure.cred(f"pool-{POOL}")
    site = SubmitterSettings.load(
        pool=POOL,
        backend="shell",
        nats_url=[secure.wss_url],
        state_dir=tmp_path / "site",
        nats_nkey_seed_file=secure.written.seed_files[f"pool-{POOL}"],
        tls_ca_file=secure.tls.ca_cert,
        build_config={"runtime": "CONTAINER_RUNTIME_NONE"},
        poll_interval=0.2,
    )
    gateway_cred = secure.cred("gateway")
    gateway_nats = GatewayNatsSettings(
        url=secure.tls_url,
        nkey_seed_file=secure.written.seed_files["gateway"],
        tls_ca_file=secure.tls.ca_cert,
        inbox_prefix=gateway_cred.inbox_prefix,
    )
    assert pool_cred.inbox_prefix != gateway_cred.inbox_prefix
    async with Submitter(site), gateway_only("", default_pool=POOL, nats=gateway_nats) as stack:
        p = pod(containers={"main": ["sh", "-c", "echo over-wss"]})
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 200, response.text

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="the pod to finish (its events pushed by the site)")
        [main] = (await stack.status_of(p))["containers"]
        assert main["state"]["terminated"]["exitCode"] == 0
        logs = await stack.get("/getLogs", logs_body(p, "main"))
        assert logs.text == "over-wss\n"
        assert (await stack.post("/delete", p)).status_code == 200
        assert stack.gateway.nc.connected_url is not None and stack.gateway.nc.connected_url.scheme == "tls"
