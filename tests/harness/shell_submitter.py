"""A shell submitter on the session's nats-server, for the ``test_submitter_shell*`` tests.

The ``nc``, ``pool`` and ``submitter`` fixtures (each test module imports them by name) give a connection, a pool
of the test's own and a submitter serving it; ``final_status`` waits until a pod's job has ended.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for

Phase = pb.ContainerPhase


def uid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


@pytest.fixture
def pool() -> str:
    return f"p{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def submitter(tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS) -> AsyncIterator[Submitter]:
    await ensure_events_stream(nc.jetstream())  # as the gateway or an admin step does: pools never create it
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=pool)) as s:
        yield s


async def final_status(client: pb.SubmitterServiceStub, pod_uid: str, within: float = 20) -> pb.JobStatus:
    async def check() -> pb.JobStatus | None:
        resp = await client.get_status(pb.GetStatusRequest(pod_uids=[pod_uid]))
        st = resp.statuses[0]
        done = st.state in (pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST)
        return st if done else None

    return await wait_for(check, timeout=within, what=f"pod {pod_uid} to finish")
