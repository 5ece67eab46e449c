"""RPC-facing reads: GetStatus, ListJobs and what GetLogs needs, all answered from the registry.

The registry is shared by a pool's replicas, so whichever replica receives a call answers it
correctly, whoever owns the job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import Backend
from interlink_nats.submitters.core.errors import NotFound, Unavailable
from interlink_nats.submitters.core.lifecycle import Phase, unique_in_order
from interlink_nats.submitters.state.registry import Registry

MAX_PAGE = 5000
DEFAULT_PAGE = 500


@dataclass(frozen=True, slots=True)
class LogSource:
    """Where a container's log is, the file whose appearance ends it, and whether the job has ended."""

    path: Path
    exit_file: Path | None
    ended: bool


class Queries:
    """The reads the RPC edge answers, all from the registry (and the backend's log location)."""

    def __init__(self, *, registry: Callable[[], Registry], backend: Backend) -> None:
        self._registry = registry
        self._backend = backend

    async def get_status(self, uids: Sequence[str]) -> pb.GetStatusResponse:
        wanted = unique_in_order(uids)
        rows = await self._registry().get_many(wanted)
        statuses, unknown = [], []
        for uid in wanted:
            row = rows.get(uid)
            status = row.job_status() if row is not None else None
            if status is None:
                unknown.append(uid)
            else:
                statuses.append(status)
        return pb.GetStatusResponse(statuses=statuses, unknown_pod_uids=unknown)

    async def list_jobs(self, req: pb.ListJobsRequest) -> pb.ListJobsResponse:
        size = min(req.page_size or DEFAULT_PAGE, MAX_PAGE)
        rows = await self._registry().page(include_finished=req.include_finished, after=req.page_token, limit=size + 1)
        more = len(rows) > size
        rows = rows[:size]
        jobs = [s for s in (r.job_status() for r in rows) if s is not None]
        return pb.ListJobsResponse(jobs=jobs, next_page_token=rows[-1].uid if more and rows else "")

    async def job_phase(self, uid: str) -> Phase | None:
        row = await self._registry().get(uid)
        return row.phase if row is not None else None

    async def log_source(self, uid: str, container: str) -> LogSource:
        """``container`` empty: the batch system's own output of the job. Raises :class:`NotFound`."""
        row = await self._registry().get(uid)
        if row is None or row.phase is Phase.DELETED:
            raise NotFound(f"no job for pod {uid!r}")
        ended = row.phase is Phase.DONE
        if not container:
            return LogSource(self._backend.output_path(row.job_dir), None, ended)
        if container not in (*row.init_containers, *row.containers):
            raise NotFound(f"pod {uid!r} has no container {container!r}")
        path = layout.log_path(row.job_dir, container)
        hint = getattr(self._backend, "logs_unavailable", None)  # e.g. a remote CE before output transfer
        if hint is not None and not await asyncio.to_thread(path.exists):
            why = hint(row.job_dir)
            if why:
                raise Unavailable(why)
        return LogSource(path, layout.exit_path(row.job_dir, container), ended)
