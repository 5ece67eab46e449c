"""Polling: the jobs this instance tracks, and one batched backend poll for all of them.

Each poll snapshot (observation + container files) goes through :func:`lifecycle.plan_poll`;
this module only gathers inputs, caches them, and stores/publishes what the plan says changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters import jobfiles, logindex
from interlink_nats.submitters.backends.base import GONE, Backend, BackendState, JobHandle, Observation
from interlink_nats.submitters.clock import Clock
from interlink_nats.submitters.lifecycle import plan_poll
from interlink_nats.submitters.outbox import Outbox
from interlink_nats.submitters.registry import JobRow, Registry, StatusUpdate
from interlink_nats.submitters.status import ContainerFiles, JobMeta


def meta_from_row(row: JobRow, pool: str, backend: str) -> JobMeta:
    return JobMeta(row.uid, row.namespace, row.name, pool, row.job_id, row.init_containers, row.containers, backend)


@dataclass(slots=True)
class Tracked:
    """A job this instance polls: its identity and the last status it stored."""

    meta: JobMeta
    handle: JobHandle
    names: tuple[str, ...]
    status: bytes | None
    revision: int
    inputs: object = None
    """The (observation, files) last mapped: equal inputs give an equal status, so mapping is skipped."""
    log_sizes: dict[Path, int | None] = dataclasses.field(default_factory=dict)
    """Size of each log at its last checkpoint (``logindex``): a checkpoint is written only on change."""


@dataclass(frozen=True, slots=True)
class PollStats:
    jobs: int
    changed: int
    backend_calls: int
    seconds: float


class Poller:
    """The tracked jobs and the poll over them. ``lock`` orders polls against submit and cancel."""

    def __init__(
        self, *, pool: str, backend: Backend, clock: Clock, outbox: Outbox, registry: Callable[[], Registry]
    ) -> None:
        self.pool = pool
        self.backend = backend
        self.clock = clock
        self.outbox = outbox
        self._registry = registry
        self.tracked: dict[str, Tracked] = {}
        self.lock = asyncio.Lock()
        self.files = jobfiles.ContainerFilesCache()
        self.last_poll: PollStats | None = None

    def track(self, row: JobRow) -> Tracked:
        t = Tracked(
            meta_from_row(row, self.pool, self.backend.name),
            JobHandle(row.uid, row.job_dir, row.job_id),
            (*row.init_containers, *row.containers),
            row.status,
            row.revision,
        )
        self.tracked[row.uid] = t
        return t

    def untrack(self, uid: str) -> None:
        """Stop polling a job (call with ``lock`` held, so a poll in flight cannot store it again)."""
        self.tracked.pop(uid, None)

    async def poll_once(self) -> PollStats:
        """One batched backend poll for every tracked job; store and publish what changed."""
        reg = self._registry()
        t0 = self.clock.monotonic()
        calls0 = self.backend.calls
        async with self.lock:
            tracked = list(self.tracked.values())
        observed = await self.backend.poll([t.handle for t in tracked]) if tracked else {}
        now = self.clock.time()
        # Files, mapping and serialisation run off the event loop: thousands of statuses changing
        # at once must not stall RPC handling.
        updates, events, finished = await asyncio.to_thread(self._compute, tracked, observed, now)
        async with self.lock:
            # A job cancelled while we polled is no longer tracked: its tombstone must win.
            updates = [u for u in updates if u.uid in self.tracked]
            await reg.save_statuses(updates)
            for t in finished:
                if self.tracked.get(t.meta.uid) is t:
                    del self.tracked[t.meta.uid]
                    self.files.forget(t.handle.job_dir)
            for u in updates:
                self.outbox.put(u.uid, events[u.uid])
        if updates:
            self.outbox.wake()
        stats = PollStats(len(tracked), len(updates), self.backend.calls - calls0, self.clock.monotonic() - t0)
        self.last_poll = stats
        return stats

    def _compute(
        self, tracked: list[Tracked], observed: dict[str, Observation], now: float
    ) -> tuple[list[StatusUpdate], dict[str, pb.JobEvent], list[Tracked]]:
        """Map every tracked job's inputs to its status; only this poll touches ``Tracked`` fields."""
        updates: list[StatusUpdate] = []
        events: dict[str, pb.JobEvent] = {}
        finished: list[Tracked] = []
        now_ns = self.clock.time_ns()
        for t in tracked:
            files = self.files.read(t.handle.job_dir, t.names)
            obs = observed.get(t.meta.uid, GONE)
            if obs.state is not BackendState.QUEUED:
                self._checkpoint_logs(t, files, now_ns)
            inputs = (obs, files)
            if inputs == t.inputs:
                continue  # the plan is pure: nothing new to say (the common case, by far)
            t.inputs = inputs
            plan = plan_poll(t.meta, obs, files, last_status=t.status, revision=t.revision, now=now)
            if plan.untrack:
                finished.append(t)
            change = plan.change
            if change is None:
                continue
            t.status = change.raw
            t.revision = change.revision
            updates.append(
                StatusUpdate(
                    t.meta.uid, change.phase, int(change.status.state), change.raw, change.revision, change.finished_at
                )
            )
            change.status.updated_at = self.clock.utcnow()
            events[t.meta.uid] = self.outbox.event(change.status, change.revision)
        return updates, events, finished

    def _checkpoint_logs(self, t: Tracked, files: dict[str, ContainerFiles], now_ns: int) -> None:
        """Note the size of every log that may be growing (for GetLogs since_time/timestamps)."""
        job_dir = t.handle.job_dir
        paths = [layout.log_path(job_dir, n) for n in t.names if n in files and files[n].started_at is not None]
        paths.append(self.backend.output_path(job_dir))
        for path in paths:
            t.log_sizes[path] = logindex.record(path, now_ns, t.log_sizes.get(path))
