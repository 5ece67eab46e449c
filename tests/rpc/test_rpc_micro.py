"""NATS micro discovery ($SRV.PING/INFO/STATS) answered by RpcServer, against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats.v1 import JobScript, SubmitRequest, SubmitResponse, SubmitterServiceBase
from interlink_nats.kernel.subjects import rpc_subject
from interlink_nats.services.bus.rpc import SERVICE_NAME, RpcServer, submitter_client
from nats.aio.client import Client as NATS

SEMVER = re.compile(r"^\d+\.\d+\.\d+")


class Flaky(SubmitterServiceBase):
    async def submit(self, message: SubmitRequest) -> SubmitResponse:
        if message.job and message.job.script == "missing":
            raise GRPCError(Status.NOT_FOUND, "no such pod")
        return SubmitResponse(job_id="1")


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[NATS]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


@pytest.fixture
def name() -> str:
    """A service name of the test's own, so other servers on the shared nats-server stay out of the way."""
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def server(nc: NATS, name: str) -> AsyncIterator[RpcServer]:
    rpc = RpcServer(nc, [Flaky()], pool="gpu-a", name=name, metadata={"site": "cineca"})
    await rpc.start()
    yield rpc
    await rpc.stop(grace_s=1)


async def ask(nc: NATS, subject: str) -> dict[str, Any]:
    await nc.flush()
    reply = await nc.request(subject, b"", timeout=10)
    return json.loads(reply.data)


async def test_ping_answers_on_all_three_subjects(nc: NATS, server: RpcServer, name: str) -> None:
    for subject in (f"$SRV.PING.{name}", f"$SRV.PING.{name}.{server.micro.id}"):
        ping = await ask(nc, subject)
        assert ping == {
            "type": "io.nats.micro.v1.ping_response",
            "name": name,
            "id": server.micro.id,
            "version": ping["version"],
            "metadata": {"site": "cineca", "pool": "gpu-a"},
        }
        assert SEMVER.match(ping["version"])

    # $SRV.PING is answered by every service on the bus: collect and find ours.
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$SRV.PING", b"", reply=inbox)
    ids = set()
    async with asyncio.timeout(10):
        while server.micro.id not in ids:
            ids.add(json.loads((await sub.next_msg(timeout=10)).data)["id"])
    await sub.unsubscribe()


async def test_info_lists_every_endpoint_with_its_subject_and_queue_group(
    nc: NATS, server: RpcServer, name: str
) -> None:
    info = await ask(nc, f"$SRV.INFO.{name}")
    assert info["type"] == "io.nats.micro.v1.info_response"
    assert info["id"] == server.micro.id
    assert info["metadata"]["pool"] == "gpu-a"
    assert isinstance(info["description"], str)
    endpoints = {e["name"]: e for e in info["endpoints"]}
    assert set(endpoints) == {"Submit", "SubmitGroup", "GetStatus", "GetLogs", "Cancel", "ListJobs", "Describe"}
    assert endpoints["Submit"]["subject"] == rpc_subject("Submit", "gpu-a")
    assert all(e["queue_group"] == "gpu-a" for e in endpoints.values())
    assert endpoints["GetLogs"]["metadata"]["cardinality"] == "UNARY_STREAM"


async def test_stats_count_requests_errors_and_time(nc: NATS, server: RpcServer, name: str) -> None:
    stub = submitter_client(nc, "gpu-a")
    for _ in range(3):
        await stub.submit(SubmitRequest())
    with pytest.raises(GRPCError):
        await stub.submit(SubmitRequest(job=JobScript(script="missing")))

    stats = await ask(nc, f"$SRV.STATS.{name}.{server.micro.id}")

    assert stats["type"] == "io.nats.micro.v1.stats_response"
    assert stats["name"] == name
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$", stats["started"])
    submit = next(e for e in stats["endpoints"] if e["name"] == "Submit")
    assert submit["num_requests"] == 4
    assert submit["num_errors"] == 1
    assert submit["last_error"] == "NOT_FOUND:no such pod"
    assert submit["processing_time"] > 0
    assert submit["average_processing_time"] == submit["processing_time"] // 4
    cancel = next(e for e in stats["endpoints"] if e["name"] == "Cancel")
    assert (cancel["num_requests"], cancel["num_errors"], cancel["last_error"]) == (0, 0, "")


async def test_default_name_is_the_submitter_service(nc: NATS) -> None:
    rpc = RpcServer(nc, [Flaky()], pool="cpu-b")
    await rpc.start()
    try:
        ping = await ask(nc, f"$SRV.PING.{SERVICE_NAME}.{rpc.micro.id}")
        assert ping["name"] == "interlink-submitter"
    finally:
        await rpc.stop()


async def test_a_stopped_server_no_longer_answers(nc: NATS, server: RpcServer, name: str) -> None:
    await server.stop()
    await nc.flush()
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request(f"$SRV.PING.{name}", b"", timeout=10)


FULL_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0.1.0", "0.1.0"),
        (None, "0.0.0+unknown"),
        ("0.1.dev3+gabc.d2026", "0.0.0+0.1.dev3.gabc.d2026"),
        ("1.0", "0.0.0+1.0"),
    ],
)
def test_the_advertised_version_is_always_semver(raw: str | None, expected: str) -> None:
    """$SRV.INFO needs semver, also from a bare checkout (no package metadata) or a PEP 440 dev build."""
    from interlink_nats.kernel import version

    assert version.semver(raw) == expected
    assert FULL_SEMVER.match(expected)
    assert version.installed_version("no-such-distribution-interlink") == "0.0.0+unknown"
    assert FULL_SEMVER.match(version.__version__)
