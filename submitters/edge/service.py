"""``SubmitterService`` over the runtime: the RPC edge, thin request/response translation, no state.

This is the one place where the submitter's domain errors (``submitters.core.errors``) become RPC
status codes; nothing below it imports grpclib. It depends on the small interfaces it calls
(:class:`Submitting`, :class:`Querying`), not on the runtime, so the runtime can build it without an
import cycle. Each Submit is counted here, by outcome and reason (``edge.metrics``), where its answer is known;
:func:`rpc_server` builds the server the service is served by.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import NoReturn, Protocol

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import Clock
from interlink_nats.kernel.log_context import log_fields
from interlink_nats.kernel.names import is_dns_label, is_pod_uid
from interlink_nats.services.bus.rpc import RpcServer, current_call
from interlink_nats.submitters.core import fastwire
from interlink_nats.submitters.core.backend import Backend
from interlink_nats.submitters.core.errors import (
    AlreadyExists,
    CannotSubmit,
    InvalidRequest,
    NotFound,
    Refused,
    SubmitterFault,
    Unavailable,
)
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.core.requests import shown
from interlink_nats.submitters.edge.metrics import SubmitterMetrics
from interlink_nats.submitters.engine.queries import LogSource
from interlink_nats.submitters.jobdirs import logindex, logs
from nats.aio.client import Client as NATS

FOLLOW_INTERVAL = 0.25
"""How often a followed log is checked for new bytes."""
FOLLOW_STATE_EVERY = 2.0
"""How often a follower re-reads the job's state from the registry."""
MAX_STATUS_BATCH = 10_000

RPC_STATUS: dict[type, Status] = {
    InvalidRequest: Status.INVALID_ARGUMENT,
    NotFound: Status.NOT_FOUND,
    AlreadyExists: Status.ALREADY_EXISTS,
    Refused: Status.FAILED_PRECONDITION,
    CannotSubmit: Status.FAILED_PRECONDITION,
    Unavailable: Status.UNAVAILABLE,
}
"""Domain error → RPC status; anything else is a bug and surfaces as the server's internal error."""


def rpc_error(exc: SubmitterFault) -> GRPCError:
    for kind in type(exc).__mro__:
        status = RPC_STATUS.get(kind)
        if status is not None:
            return GRPCError(status, str(exc))
    return GRPCError(Status.INTERNAL, str(exc))


def _raise(exc: SubmitterFault) -> NoReturn:
    raise rpc_error(exc) from None


class Submitting(Protocol):
    """The RPCs that change a job (``submission.Submissions``)."""

    async def submit(self, job: pb.JobScript, *, deadline: float | None = None) -> pb.SubmitResponse: ...

    async def cancel(self, uid: str) -> pb.CancelResponse: ...


class SubmittingGroups(Protocol):
    """SubmitGroup (``gangs.PodGroupSubmissions``)."""

    async def submit_group(
        self, req: pb.SubmitGroupRequest, *, deadline: float | None = None
    ) -> pb.SubmitGroupResponse: ...


class Querying(Protocol):
    """The reads (``queries.Queries``)."""

    async def get_status(self, uids: Sequence[str]) -> pb.GetStatusResponse: ...

    async def list_jobs(self, req: pb.ListJobsRequest) -> pb.ListJobsResponse: ...

    async def log_source(self, uid: str, container: str) -> LogSource: ...

    async def job_phase(self, uid: str) -> Phase | None: ...


class SubmitterServiceImpl(pb.SubmitterServiceBase):
    """The RPCs over the parts of a submitter that answer them, called directly (no forwarding layer)."""

    def __init__(
        self,
        submissions: Submitting,
        queries: Querying,
        *,
        describe: Callable[[], pb.DescribeResponse],
        clock: Clock,
        gangs: SubmittingGroups | None = None,
        metrics: SubmitterMetrics | None = None,
    ) -> None:
        self.submissions = submissions
        self.metrics = metrics if metrics is not None else SubmitterMetrics("")
        """Where Submits are counted by outcome and reason (the submitter's /metrics)."""
        self.gangs = gangs
        self.queries = queries
        self._describe = describe
        self.clock = clock

    async def submit(self, message: pb.SubmitRequest) -> pb.SubmitResponse:
        pod = message.job.pod if message.job is not None else None
        try:
            with self.metrics.submit("Submit") as answered:
                if message.job is None:
                    raise InvalidRequest("job is required")
                fields = {"pod_uid": pod.uid, "namespace": pod.namespace, "pod": pod.name} if pod is not None else {}
                with log_fields(**fields):
                    reply = await self.submissions.submit(message.job, deadline=self._deadline())
                answered.created = reply.created
                return reply
        except SubmitterFault as exc:
            _raise(exc)

    async def submit_group(self, message: pb.SubmitGroupRequest) -> pb.SubmitGroupResponse:
        try:
            with self.metrics.submit("SubmitGroup") as answered:
                if self.gangs is None:
                    raise Refused("this submitter does not run pod groups (SubmitGroup)")
                reply = await self.gangs.submit_group(message, deadline=self._deadline())
                answered.created = reply.created
                return reply
        except SubmitterFault as exc:
            _raise(exc)

    def _deadline(self) -> float | None:
        """When the caller of the RPC being handled stops waiting (its ``Rpc-Timeout``), as unix time; None
        without one (or outside an RPC: a direct call)."""
        try:
            left = current_call().time_remaining()
        except LookupError:
            return None
        return None if left is None else self.clock.time() + left

    async def get_status(self, message: pb.GetStatusRequest) -> pb.GetStatusResponse:
        try:
            if len(message.pod_uids) > MAX_STATUS_BATCH:
                raise InvalidRequest(f"at most {MAX_STATUS_BATCH} pods per call")
            return await self.queries.get_status(message.pod_uids)
        except SubmitterFault as exc:
            _raise(exc)

    async def cancel(self, message: pb.CancelRequest) -> pb.CancelResponse:
        try:
            if not message.pod_uid:
                raise InvalidRequest("pod_uid is required")
            _check_uid(message.pod_uid)
            with log_fields(pod_uid=message.pod_uid):
                return await self.submissions.cancel(message.pod_uid)
        except SubmitterFault as exc:
            _raise(exc)

    async def list_jobs(self, message: pb.ListJobsRequest) -> pb.ListJobsResponse:
        try:
            return await self.queries.list_jobs(message)
        except SubmitterFault as exc:
            _raise(exc)

    async def describe(self, message: pb.DescribeRequest) -> pb.DescribeResponse:
        return self._describe()

    async def get_logs(self, message: pb.GetLogsRequest) -> AsyncIterator[pb.GetLogsResponse]:
        try:
            async with contextlib.aclosing(self._logs(message)) as chunks:
                async for chunk in chunks:
                    yield chunk
        except SubmitterFault as exc:
            _raise(exc)

    async def _logs(self, message: pb.GetLogsRequest) -> AsyncGenerator[pb.GetLogsResponse, None]:
        """Stream a container's log from an offset; with ``follow``, until its ``.exit`` appears or the job ends.

        ``container`` empty means the batch system's own output of the job (``job.out``).
        ``since_time`` and ``timestamps`` use the log's checkpoint index (``logindex``): times are
        those at which the submitter first saw the bytes, so their precision is one poll interval.
        """
        _check_uid(message.pod_uid)
        if message.container and not is_dns_label(message.container):
            raise InvalidRequest(f"container {shown(message.container)} is not a container name (a DNS label)")
        source = await self.queries.log_source(message.pod_uid, message.container)
        if message.previous:
            return  # containers are never restarted on a site: there is no previous instance
        path, exit_file = source.path, source.exit_file
        clock = self.clock
        offset = await asyncio.to_thread(
            logs.start_offset,
            path,
            offset=message.offset,
            tail_lines=message.tail_lines,
        )
        budget = logs.ByteBudget(message.limit_bytes)
        stamper: logindex.Stamper | None = None
        if message.since_time is not None or message.timestamps:
            now_ns = clock.time_ns()
            index, _ = await asyncio.to_thread(logindex.checkpoint_and_read, path, now_ns)
            if message.since_time is not None and not message.offset:
                since_ns = _unix_ns(message.since_time)
                offset = max(offset, await asyncio.to_thread(logindex.since_start, path, index, since_ns))
            if message.timestamps:
                stamper = logindex.Stamper(index, offset, now_ns)
        ended = source.ended
        last_state_check = clock.monotonic()
        while True:
            # Decide "finished" before reading, so bytes written just before the end are still sent.
            finished = ended or (exit_file is not None and await asyncio.to_thread(exit_file.exists))
            while not budget.spent:
                data = await asyncio.to_thread(logs.read_chunk, path, offset)
                if not data:
                    break
                offset += len(data)
                out = budget.take(stamper.feed(data) if stamper is not None else data)
                yield pb.GetLogsResponse(data=out, offset=offset)
            if not message.follow or finished or budget.spent:
                return
            await clock.sleep(FOLLOW_INTERVAL)
            if stamper is not None:  # a follower checkpoints what it is about to read: its lines get this time
                now_ns = clock.time_ns()
                size = await asyncio.to_thread(
                    logindex.record, path, now_ns, stamper.index[-1].size if stamper.index else None
                )
                if size:
                    stamper.add(logindex.Checkpoint(now_ns, size))
            if clock.monotonic() - last_state_check >= FOLLOW_STATE_EVERY:
                last_state_check = clock.monotonic()
                phase = await self.queries.job_phase(message.pod_uid)
                if phase is None or phase is Phase.DELETED:
                    return
                ended = phase is Phase.DONE


def _check_uid(uid: str) -> None:
    """A pod uid from any NATS client: checked before it is looked up (``core.requests`` checks Submit's)."""
    if not is_pod_uid(uid):
        raise InvalidRequest(f"pod_uid {shown(uid)} is invalid: letters, digits, '.', '_' and '-' only")


def _unix_ns(when: dt.datetime) -> int:
    """A protobuf Timestamp as betterproto2 gives it (an aware datetime; naive means UTC) in unix ns."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class Served(Protocol):
    """What :func:`rpc_server` serves (``runtime.Submitter`` provides it)."""

    pool: str
    instance_id: str
    clock: Clock
    metrics: SubmitterMetrics

    @property
    def submissions(self) -> Submitting: ...
    @property
    def queries(self) -> Querying: ...
    @property
    def gangs(self) -> SubmittingGroups: ...
    @property
    def backend(self) -> Backend: ...
    def describe(self) -> pb.DescribeResponse: ...


def rpc_server(nc: NATS, submitter: Served, *, max_concurrency: int) -> RpcServer:
    """The RPC server of ``submitter``'s pool: its service, the hot messages through ``fastwire`` and every call
    timed into its metrics (not started)."""
    service = SubmitterServiceImpl(
        submitter.submissions,
        submitter.queries,
        describe=submitter.describe,
        clock=submitter.clock,
        gangs=submitter.gangs,
        metrics=submitter.metrics,
    )
    return RpcServer(
        nc,
        [service],
        pool=submitter.pool,
        max_concurrency=max_concurrency,
        metadata={"backend": submitter.backend.name, "instance": submitter.instance_id},
        decoders={pb.SubmitRequest: fastwire.plain_submit_request},
        encoders={pb.SubmitResponse: fastwire.submit_response},
        latency=submitter.metrics.rpc,
    )
