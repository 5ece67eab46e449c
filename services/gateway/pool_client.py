"""The gateway's client of the pools' ``SubmitterService``: one stub per pool, waiting for a pool
with no submitter connected, and RPC errors turned into :class:`PoolError` (counted in the metrics).

Nothing above this module sees a ``GRPCError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar, cast

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.services.bus.rpc import NatsChannel, submitter_client
from interlink_nats.services.gateway.errors import GatewayError, PoolError, pool_error
from interlink_nats.services.gateway.metrics import GatewayMetrics
from interlink_nats.services.gateway.submit_wire import SubmitReply, decode_submit_response, encode_submit_request
from nats.aio.client import Client as NatsClient

_T = TypeVar("_T")

LOG_STREAM_WINDOW = 4
"""Log chunks (64 KiB each) a submitter may send ahead of what the HTTP client has taken: the bound
on a /getLogs stream's memory here, however slow its reader (uvicorn waits for the socket to drain)."""
NATS_DOWN = "NATS is unavailable: the gateway is not connected to nats-server (reconnecting)"


SUBMIT_ROUTE = "/interlink_nats.v1.SubmitterService/Submit"
"""The generated stub's route of ``Submit`` (a test checks it against the service's mapping)."""
RETRY_FIRST_WAIT_S = 0.05
RETRY_MAX_WAIT_S = 0.5


def _no_submitter(exc: BaseException) -> bool:
    return isinstance(exc, GRPCError) and exc.status is Status.UNAVAILABLE


class PoolClient:
    def __init__(
        self,
        nc: NatsClient,
        metrics: GatewayMetrics,
        *,
        call_timeout_s: float,
        pool_wait_s: float,
        submit_resend_s: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.nc = nc
        self.clock = clock
        self.metrics = metrics
        self.call_timeout_s = call_timeout_s
        self.pool_wait_s = pool_wait_s
        self.submit_resend_s = submit_resend_s
        self._stubs: dict[str, pb.SubmitterServiceStub] = {}

    def stub(self, pool: str) -> pb.SubmitterServiceStub:
        stub = self._stubs.get(pool)
        if stub is None:
            stub = self._stubs[pool] = submitter_client(
                self.nc, pool, timeout=self.call_timeout_s, stream_window=LOG_STREAM_WINDOW
            )
        return stub

    def channel(self, pool: str) -> NatsChannel:
        """The stub's channel, for calls made with bytes encoded here (``submit``)."""
        return cast(NatsChannel, self.stub(pool).channel)

    def require_nats(self) -> None:
        """Answer at once when our own NATS connection is down, rather than hold the call while nats-py
        reconnects and then blame the pool: the pool may be fine, it is the gateway that cannot reach it."""
        if not self.nc.is_connected:
            raise GatewayError(503, NATS_DOWN)

    # --- calls ---------------------------------------------------------------------------------
    async def describe(self, pool: str, deadline_s: float) -> pb.DescribeResponse:
        return await self._call(
            pool, "Describe", lambda: self.stub(pool).describe(pb.DescribeRequest(), timeout=deadline_s), wait=True
        )

    async def submit(self, pool: str, job: pb.JobScript) -> SubmitReply:
        """``Submit``, encoded and decoded by ``submit_wire`` (the same bytes as the stub's, for less CPU); sent
        again every ``submit_resend_s`` while unanswered (a repeat joins the submission in progress)."""
        payload = encode_submit_request(job)
        channel = self.channel(pool)
        timeout, every = self.call_timeout_s, self.submit_resend_s

        def call() -> Awaitable[bytes]:
            return channel.unary(SUBMIT_ROUTE, payload, timeout=timeout, resend_every_s=every)

        reply = await self._call(pool, "Submit", call, wait=True)
        try:
            return decode_submit_response(reply)
        except (ValueError, IndexError):
            invalid = GRPCError(Status.INTERNAL, "RPC protocol error: reply is not a valid SubmitResponse")
            raise self._failed(pool, "Submit", invalid) from None

    async def submit_group(
        self, pool: str, members: list[pb.JobScript], kind: pb.GroupKind = pb.GroupKind.UNSPECIFIED
    ) -> pb.SubmitGroupResponse:
        """``SubmitGroup``, through the generated stub (rare: once per gang or array). Not retried here: the
        caller retries what is transient until the group's own deadline."""
        request = pb.SubmitGroupRequest(members=members, kind=kind)
        reply = await self._call(
            pool, "SubmitGroup", lambda: self.stub(pool).submit_group(request, timeout=self.call_timeout_s)
        )
        if not reply.job_id:  # every member would be recorded as sent with no job to follow
            invalid = GRPCError(Status.INTERNAL, "RPC protocol error: SubmitGroupResponse without a job_id")
            raise self._failed(pool, "SubmitGroup", invalid)
        return reply

    async def cancel(self, pool: str, pod_uid: str) -> pb.CancelResponse:
        request = pb.CancelRequest(pod_uid=pod_uid)
        return await self._call(pool, "Cancel", lambda: self.stub(pool).cancel(request, timeout=self.call_timeout_s))

    async def get_status(self, pool: str, pod_uids: list[str], timeout_s: float) -> pb.GetStatusResponse:
        request = pb.GetStatusRequest(pod_uids=pod_uids)
        return await self._call(pool, "GetStatus", lambda: self.stub(pool).get_status(request, timeout=timeout_s))

    async def list_jobs(self, pool: str, page_token: str) -> pb.ListJobsResponse:
        request = pb.ListJobsRequest(include_finished=True, page_size=500, page_token=page_token)
        return await self._call(
            pool, "ListJobs", lambda: self.stub(pool).list_jobs(request, timeout=self.call_timeout_s)
        )

    async def get_logs(self, pool: str, request: pb.GetLogsRequest) -> AsyncGenerator[bytes, None]:
        """The log's non-empty chunks.

        No deadline on the stream as a whole: a slow reader may take long over a large log. A reader that
        goes away is noticed by the HTTP server, and closing this generator then cancels the submitter's
        stream at once, not at GC time; a reader that stalls is given up by the submitter's idle timeout.
        """
        # betterproto2 declares the stream an AsyncIterator; it is an async generator, which aclosing needs.
        stream = cast(AsyncGenerator[pb.GetLogsResponse, None], self.stub(pool).get_logs(request, timeout=None))
        self.metrics.log_streams.inc()
        try:
            async with contextlib.aclosing(stream) as chunks:
                async for chunk in chunks:
                    if chunk.data:
                        yield chunk.data
        except GRPCError as exc:
            raise self._failed(pool, "GetLogs", exc) from None
        finally:
            self.metrics.log_streams.dec()

    # --- retry and error mapping ---------------------------------------------------------------
    async def _call(self, pool: str, method: str, call: Callable[[], Awaitable[_T]], *, wait: bool = False) -> _T:
        """One RPC; with ``wait``, UNAVAILABLE (no submitter of the pool connected) is retried for up to
        ``pool_wait_s``, so a submitter restarting does not fail a create.

        The retries are a plain loop, not tenacity's ``AsyncRetrying``: its set-up cost every create
        ~10 µs although nearly every call succeeds at once. The schedule is the same: waits of 50 ms
        doubling up to 500 ms, and no wait that would end past ``pool_wait_s`` after the first try.
        Its latency, retries included, is observed by outcome (``interlink_gateway_rpc_seconds``).
        """
        clock = self.clock
        started = clock.monotonic()
        attempt = 0
        while True:
            try:
                reply = await call()
            except GRPCError as exc:
                attempt += 1
                # no use waiting for the pool while we ourselves cannot reach NATS
                if wait and _no_submitter(exc) and self.nc.is_connected:
                    pause = min(RETRY_FIRST_WAIT_S * 2 ** (attempt - 1), RETRY_MAX_WAIT_S)
                    if clock.monotonic() - started + pause < self.pool_wait_s:
                        await clock.sleep(pause)
                        continue
                self.metrics.rpc.observe(self.metrics.pool_label(pool), method, exc.status, clock.monotonic() - started)
                if wait and _no_submitter(exc) and not self.nc.is_connected:
                    raise GatewayError(503, NATS_DOWN) from None
                raise self._failed(pool, method, exc) from None
            self.metrics.rpc.observe(self.metrics.pool_label(pool), method, Status.OK, clock.monotonic() - started)
            return reply

    def _failed(self, pool: str, method: str, exc: GRPCError) -> PoolError:
        self.metrics.rpc_errors.labels(pool=self.metrics.pool_label(pool), method=method, status=exc.status.name).inc()
        return pool_error(pool, exc.status, exc.message or "", self.pool_wait_s)
