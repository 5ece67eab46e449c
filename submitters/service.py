"""``SubmitterService`` over the runtime: thin request/response translation, no state of its own.

Every answer comes from the registry (shared by replicas), so whichever replica of the pool
receives a call answers it correctly, whoever owns the job.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters import logindex, logs
from interlink_nats.submitters.registry import DELETED, DONE

if TYPE_CHECKING:
    from interlink_nats.submitters.runtime import Submitter

FOLLOW_INTERVAL = 0.25
"""How often a followed log is checked for new bytes."""
FOLLOW_STATE_EVERY = 2.0
"""How often a follower re-reads the job's state from the registry."""
MAX_STATUS_BATCH = 10_000


class SubmitterServiceImpl(pb.SubmitterServiceBase):
    def __init__(self, submitter: Submitter) -> None:
        self.s = submitter

    async def submit(self, message: pb.SubmitRequest) -> pb.SubmitResponse:
        if message.job is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "job is required")
        return await self.s.submit(message.job)

    async def get_status(self, message: pb.GetStatusRequest) -> pb.GetStatusResponse:
        if len(message.pod_uids) > MAX_STATUS_BATCH:
            raise GRPCError(Status.INVALID_ARGUMENT, f"at most {MAX_STATUS_BATCH} pods per call")
        return await self.s.get_status(message.pod_uids)

    async def cancel(self, message: pb.CancelRequest) -> pb.CancelResponse:
        if not message.pod_uid:
            raise GRPCError(Status.INVALID_ARGUMENT, "pod_uid is required")
        return await self.s.cancel(message.pod_uid)

    async def list_jobs(self, message: pb.ListJobsRequest) -> pb.ListJobsResponse:
        return await self.s.list_jobs(message)

    async def describe(self, message: pb.DescribeRequest) -> pb.DescribeResponse:
        return self.s.describe()

    async def get_logs(self, message: pb.GetLogsRequest) -> AsyncIterator[pb.GetLogsResponse]:
        """Stream a container's log from an offset; with ``follow``, until its ``.exit`` appears or the job ends.

        ``container`` empty means the batch system's own output of the job (``job.out``).
        ``since_time`` and ``timestamps`` use the log's checkpoint index (``logindex``): times are
        those at which the submitter first saw the bytes, so their precision is one poll interval.
        """
        row = await self.s._reg().get(message.pod_uid)
        if row is None or row.phase == DELETED:
            raise GRPCError(Status.NOT_FOUND, f"no job for pod {message.pod_uid!r}")
        if message.container and message.container not in (*row.init_containers, *row.containers):
            raise GRPCError(Status.NOT_FOUND, f"pod {message.pod_uid!r} has no container {message.container!r}")
        if message.previous:
            return  # containers are never restarted on a site: there is no previous instance
        if message.container:
            path = layout.log_path(row.job_dir, message.container)
            exit_file = layout.exit_path(row.job_dir, message.container)
        else:
            path = self.s.backend.output_path(row.job_dir)
            exit_file = None
        offset = await asyncio.to_thread(
            logs.start_offset,
            path,
            offset=message.offset,
            tail_lines=message.tail_lines,
        )
        budget = logs.ByteBudget(message.limit_bytes)
        stamper: logindex.Stamper | None = None
        if message.since_time is not None or message.timestamps:
            now_ns = time.time_ns()
            index, _ = await asyncio.to_thread(logindex.checkpoint_and_read, path, now_ns)
            if message.since_time is not None and not message.offset:
                since_ns = _unix_ns(message.since_time)
                offset = max(offset, await asyncio.to_thread(logindex.since_start, path, index, since_ns))
            if message.timestamps:
                stamper = logindex.Stamper(index, offset, now_ns)
        ended = row.phase == DONE
        last_state_check = time.monotonic()
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
            await asyncio.sleep(FOLLOW_INTERVAL)
            if stamper is not None:  # a follower checkpoints what it is about to read: its lines get this time
                now_ns = time.time_ns()
                size = await asyncio.to_thread(
                    logindex.record, path, now_ns, stamper.index[-1].size if stamper.index else None
                )
                if size:
                    stamper.add(logindex.Checkpoint(now_ns, size))
            if time.monotonic() - last_state_check >= FOLLOW_STATE_EVERY:
                last_state_check = time.monotonic()
                current = await self.s._reg().get(message.pod_uid)
                if current is None or current.phase == DELETED:
                    return
                ended = current.phase == DONE


def _unix_ns(when: dt.datetime) -> int:
    """A protobuf Timestamp as betterproto2 gives it (an aware datetime; naive means UTC) in unix ns."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
