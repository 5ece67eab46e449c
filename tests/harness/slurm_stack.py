"""A real one-node Slurm for tests, a pool name, a NATS client with the events stream, waits on a status."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.submitters.testing import wait_for
from slurm_cluster import SlurmCluster, slurm_for_tests

TERMINAL = {pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST}


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


@pytest.fixture
def pool() -> str:
    return f"slurm{uuid.uuid4().hex[:8]}"


async def status_of(client: pb.SubmitterServiceStub, u: str) -> pb.JobStatus:
    return (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]


async def until_terminal(client: pb.SubmitterServiceStub, u: str, within: float = 60) -> pb.JobStatus:
    async def check() -> pb.JobStatus | None:
        st = await status_of(client, u)
        return st if st.state in TERMINAL else None

    return await wait_for(check, timeout=within, interval=0.25, what=f"pod {u} to end")


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    """A client, with the events stream made as the gateway makes it (submitters only look it up)."""
    conn = await nats.connect(nats_url)
    await ensure_events_stream(conn.jetstream(timeout=5))
    yield conn
    await conn.close()
