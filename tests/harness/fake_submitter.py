"""A submitter service that answers from memory, for tests of who may call it over NATS (not a stand-in for a
site: it runs nothing)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import nats.errors
from interlink_nats.gen.interlink_nats.v1 import (
    DescribeRequest,
    DescribeResponse,
    GetLogsRequest,
    GetLogsResponse,
    ResourceReport,
    SubmitterServiceBase,
)


class FakeSubmitter(SubmitterServiceBase):
    """Just enough of a pool: Describe names the pool, GetLogs streams more chunks than one window."""

    def __init__(self, pool: str) -> None:
        self.pool = pool

    async def describe(self, message: DescribeRequest) -> DescribeResponse:
        return DescribeResponse(pool=self.pool, backend="fake", resources=ResourceReport(pool=self.pool))

    async def get_logs(self, message: GetLogsRequest) -> AsyncIterator[GetLogsResponse]:
        for i in range(100):
            yield GetLogsResponse(data=f"line {i}\n".encode(), offset=i + 1)


async def settle(nc: nats.NATS) -> None:
    """Make sure the server has processed our subscriptions.

    nats-py 2.16's ``flush()`` writes its PING straight to the socket while a SUB may still
    sit in the pending buffer for the flusher task, so one flush can return before the
    subscription exists (seen over TLS, where the two go out as separate records). The
    second PING is written after the flusher ran, hence after the SUB.
    """
    await nc.flush()
    await nc.flush()
