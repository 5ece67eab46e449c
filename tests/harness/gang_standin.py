"""A stand-in for a pool's submitter in the gateway's pod-group tests: it answers Describe (runtime none) and
records every SubmitGroup it gets, answering a job id, or the refusal or outage a test sets. Served over real NATS
by the project's RpcServer, so the gateway's calls cross the same wire as to a real submitter."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import nats
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import RpcServer


class GangStandIn(pb.SubmitterServiceBase):
    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.requests: list[pb.SubmitGroupRequest] = []
        self.cancels: list[str] = []
        self.refuse: GRPCError | None = None
        """Set: every SubmitGroup is answered with this error (counted in ``requests`` all the same)."""
        self.without_job_id = False
        """Set: every SubmitGroup is answered as created but with no job id (a pool breaking the contract)."""
        self.arrived = asyncio.Event()
        self._ids = itertools.count(1)

    async def describe(self, message: pb.DescribeRequest) -> pb.DescribeResponse:
        config = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)
        return pb.DescribeResponse(pool=self.pool, build_config=config, backend="standin")

    async def submit_group(self, message: pb.SubmitGroupRequest) -> pb.SubmitGroupResponse:
        self.requests.append(message)
        self.arrived.set()
        if self.refuse is not None:
            raise self.refuse
        job_id = "" if self.without_job_id else f"gang-{next(self._ids)}"
        return pb.SubmitGroupResponse(job_id=job_id, created=True)

    async def list_jobs(self, message: pb.ListJobsRequest) -> pb.ListJobsResponse:
        return pb.ListJobsResponse()

    async def get_status(self, message: pb.GetStatusRequest) -> pb.GetStatusResponse:
        return pb.GetStatusResponse()

    async def cancel(self, message: pb.CancelRequest) -> pb.CancelResponse:
        self.cancels.append(message.pod_uid)
        return pb.CancelResponse()

    async def next_request(self, after: int | None = None, within_s: float = 20.0) -> pb.SubmitGroupRequest:
        """Waits for the SubmitGroup after the first ``after`` (default: after those already received)."""
        seen = len(self.requests) if after is None else after
        async with asyncio.timeout(within_s):
            while len(self.requests) <= seen:
                self.arrived.clear()
                await self.arrived.wait()
        return self.requests[seen]


UNAVAILABLE = GRPCError(Status.UNAVAILABLE, "the site is restarting")


@contextlib.asynccontextmanager
async def serving_standins(nats_url: str, *pools: str) -> AsyncIterator[list[GangStandIn]]:
    """One stand-in per pool, each served until the block ends."""
    nc = await nats.connect(nats_url)
    standins = [GangStandIn(pool) for pool in pools]
    servers = [RpcServer(nc, [s], pool=s.pool) for s in standins]
    try:
        for server in servers:
            await server.start()
        yield standins
    finally:
        for server in servers:
            await server.stop(grace_s=1)
        await nc.close()
