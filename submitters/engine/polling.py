"""Polling: the jobs this instance tracks, and one batched backend poll for all of them.

Each poll snapshot (observation + container files) goes through :func:`lifecycle.plan_poll`;
this module only gathers inputs, caches them, and stores/publishes what the plan says changed.

Why a poll costs what changed, not what is tracked (10,000 idle jobs must cost next to nothing): a
job's container files are read again only when something says they may have changed — its
observation is a different object than last time (backends hand back the same object for an
unchanged job), the pool's change journal names it (``jobfiles.ChangeJournal``: the script appends
after every container file it writes), or it is in this poll's sweep slice. The sweep re-reads every
job once per ``SWEEP_POLLS`` polls (at most ``SWEEP_MAX`` jobs per poll), so a hint that was lost (two
NFS clients appending at once, a script from an older version) only delays a change. Logs are
checkpointed (``logindex``) when their job is read, and at every poll while they keep growing
("hot"); a quiet log is looked at again by the sweep, a hint, or a reader (GetLogs checkpoints what
it reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import Clock
from interlink_nats.submitters.core.backend import (
    GONE,
    Backend,
    BackendState,
    JobHandle,
    Observation,
    ReportsChanges,
)
from interlink_nats.submitters.core.gangs import member_observation
from interlink_nats.submitters.core.lifecycle import plan_poll
from interlink_nats.submitters.core.load import QueueLoad, queue_load
from interlink_nats.submitters.core.status import ContainerFiles, JobMeta
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.jobdirs import logindex
from interlink_nats.submitters.state.outbox import Outbox, PendingEvent
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import JobRow, StatusUpdate

SWEEP_POLLS = 12
"""The sweep reads every tracked job once per this many polls (1 minute at the default 5 s)..."""
SWEEP_MAX = 250
"""...but at most this many per poll, so its cost stays bounded: 10,000 jobs take 40 polls (about 3 minutes)."""
HOT_POLLS = 2
"""After its job changed, or while a log grows, a job's logs are checkpointed at this many more polls."""


def _ignore_start(ok: bool) -> None:
    return None


def _never_started(obs: Observation) -> bool:
    """Ended without ever running: the node failed, or the job failed before the site started it."""
    if obs.state is BackendState.NODE_FAIL:
        return True
    return obs.state is BackendState.FAILED and obs.started_at is None and obs.exit_code is None


def meta_from_row(row: JobRow, pool: str, backend: str) -> JobMeta:
    r = row
    return JobMeta(r.uid, r.namespace, r.name, pool, r.job_id, r.init_containers, r.containers, backend, r.spec)


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
    log_sizes: dict[str, int | None] = field(default_factory=dict)
    """Size of each log at its last checkpoint (``logindex``): a checkpoint is written only on change."""
    obs: Observation | None = None
    """The observation last seen (compared by identity first: backends reuse unchanged ones)."""
    files: dict[str, ContainerFiles] | None = None
    """The container files last read; None: read them at the next poll."""
    hot: int = 0
    """Polls left at which the logs are checkpointed although nothing else changed."""
    paths: tuple[str, dict[str, str], str] | None = None
    """Its ``containers/`` directory, container logs by name and the backend's output file, built once (as
    strings: a poll stats them for every job it looks at)."""
    seq: int = 0
    """Its place in the tracking order: the jobs an incremental poll looks at are mapped in that order."""
    submitted_at: float = 0.0
    """When its registry row was created (epoch seconds): the age of a job still waiting at the site."""
    left_queue: bool = False
    """The backend has seen it leave its queue (its start counted once, ok or not, for ``on_start``)."""
    gang: str = ""
    """The group uid of a pod-group member: the backend is polled for its gang's one job, not for it."""
    layout: bool = True
    """It has a layout (``JobScript.layout``), removed once the job ended; False spares the attempt (restart: tried)."""
    runner_layout: bool = False  # ``MakesLayout``: the runner removed it; the poll removes only what is left


@dataclass(slots=True)
class _Gang:
    """A gang with tracked members: the one handle the backend polls, and the members its answer fans out to."""

    handle: JobHandle
    members: dict[str, Tracked]


@dataclass(frozen=True, slots=True)
class PollStats:
    jobs: int
    changed: int
    backend_calls: int
    seconds: float


@dataclass(eq=False, repr=False, slots=True, kw_only=True)
class Poller:
    """The tracked jobs and the poll over them. ``lock`` orders polls against submit and cancel."""

    pool: str
    backend: Backend
    clock: Clock
    outbox: Outbox
    registry: Callable[[], Registry]
    tracked: dict[str, Tracked] = field(init=False, default_factory=dict)
    lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    files: jobfiles.ContainerFilesCache = field(init=False, default_factory=jobfiles.ContainerFilesCache)
    journal: jobfiles.ChangeJournal = field(init=False, default_factory=jobfiles.ChangeJournal)
    last_poll: PollStats | None = field(init=False, default=None)
    sweep_polls: int = field(init=False, default=SWEEP_POLLS)
    sweep_max: int = field(init=False, default=SWEEP_MAX)
    """Polls per sweep, and jobs per poll at most (1 and no limit: every job read at every poll, the
    benchmark's baseline)."""
    _sweep_at: int = field(init=False, default=0)
    _journals: dict[Path, int] = field(init=False, default_factory=dict)
    _journal_of: dict[str, Path] = field(init=False, default_factory=dict)
    """The change journals of the tracked jobs' directories (usually one), with how many jobs use each."""
    _seq: Iterator[int] = field(init=False, default_factory=itertools.count)
    _hot: set[str] = field(init=False, default_factory=set)
    """The jobs whose ``hot`` is set: an incremental poll looks at them without looking at the others. Only the
    poll's worker thread touches it (``_compute``); a job untracked since (ended, deleted) leaves it at the next
    poll, which is how it stays as small as the hot jobs, whatever number ended before."""
    _changes: ReportsChanges | None = field(init=False, default=None)
    """The backend, when it can tell which jobs changed (``ReportsChanges``)."""
    on_start: Callable[[bool], None] = field(init=False, default=_ignore_start)
    """Called once per job when the backend first sees it out of its queue: False when it ended without
    starting (the pool's recent failures, ``core.load``)."""
    _added: dict[str, Tracked] = field(init=False, default_factory=dict)
    _removed: list[JobHandle] = field(init=False, default_factory=list)
    """The jobs tracked and untracked since the last incremental poll took them (``ReportsChanges``)."""
    _restart: bool = field(init=False, default=True)
    """The next incremental poll starts over: the first, and any after a poll that failed midway."""
    _polling: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    """Incremental polls run one at a time: each builds on what the previous one told the backend."""
    _gangs: dict[str, _Gang] = field(init=False, default_factory=dict)
    _gangs_added: dict[str, JobHandle] = field(init=False, default_factory=dict)
    """Gangs (by group uid) with tracked members, and those whose handle the backend has not been told of
    (``ReportsChanges``); a gang leaving goes to ``_removed`` like a job. Empty without gangs, so a pool of
    single pods polls exactly as before."""

    def __post_init__(self) -> None:
        self._changes = self.backend if isinstance(self.backend, ReportsChanges) else None

    def track(self, row: JobRow, *, layout: bool = True, runner_layout: bool = False) -> Tracked:
        t = Tracked(
            meta_from_row(row, self.pool, self.backend.name),
            JobHandle(row.uid, row.job_dir, row.job_id),
            (*row.init_containers, *row.containers),
            row.status,
            row.revision,
            submitted_at=row.created_at,
            layout=layout,
            runner_layout=runner_layout,
        )
        old = self.tracked.get(row.uid)
        if old is not None:
            self._drop_journal(old)
            self._forget_handle(old)
            t.seq = old.seq  # it keeps its place in ``tracked``
        else:
            t.seq = next(self._seq)
        self.tracked[row.uid] = t
        self._added[row.uid] = t
        if row.gang:
            self._join_gang(t, row.gang)
        journal = self._journal_for(row.job_dir)
        self._journals[journal] = self._journals.get(journal, 0) + 1
        return t

    def queue_load(self, now: float) -> QueueLoad:
        """The tracked jobs the backend has not started yet (not yet polled counts as waiting)."""
        return queue_load((t.submitted_at for t in self.tracked.values() if not t.left_queue), now)

    def untrack(self, uid: str) -> None:
        """Stop polling a job (call with ``lock`` held, so a poll in flight cannot store it again)."""
        t = self.tracked.pop(uid, None)
        if t is not None:
            self._drop_journal(t)
            if self._added.get(uid) is t:
                del self._added[uid]
            self._forget_handle(t)

    def _forget_handle(self, t: Tracked) -> None:
        """Tell the backend to stop polling ``t``: its own handle, or its gang's once no member is left."""
        if not t.gang:
            self._removed.append(t.handle)
            return
        g = self._gangs.get(t.gang)
        if g is None or g.members.get(t.meta.uid) is not t:
            return
        del g.members[t.meta.uid]
        if not g.members:
            del self._gangs[t.gang]
            if self._gangs_added.pop(t.gang, None) is None:
                self._removed.append(g.handle)

    def _join_gang(self, t: Tracked, gang: str) -> None:
        """Poll ``t`` through its gang's one handle (uid = group uid, the gang's directory, the gang's job id)."""
        t.gang = gang
        g = self._gangs.get(gang)
        handle = JobHandle(gang, jobfiles.gang_dir_of(t.handle.job_dir, gang), t.handle.job_id)
        if g is None:
            g = self._gangs[gang] = _Gang(handle, {})
        elif gang not in self._gangs_added:
            self._removed.append(g.handle)  # told again, so the backend answers it at the next poll
            g.handle = handle
        g.members[t.meta.uid] = t
        self._gangs_added[gang] = g.handle

    def _handles(self, jobs: list[Tracked], gangs: list[JobHandle]) -> list[JobHandle]:
        """What the backend polls for ``jobs``: each single job's handle, and ``gangs`` (one per gang)."""
        if not gangs and not self._gangs:
            return [t.handle for t in jobs]
        return [t.handle for t in jobs if not t.gang] + gangs

    def _fan_out(self, observed: dict[str, Observation], gangs: dict[str, _Gang], complete: bool) -> None:
        """Each member of a polled gang gets the gang's observation (refined by its own exit once it ended)."""
        for uid, g in gangs.items():
            obs = observed.pop(uid, None)
            if obs is None:
                if not complete:
                    continue  # not answered: as the previous answer said
                obs = GONE
            ended = obs.state in (BackendState.COMPLETED, BackendState.FAILED)
            for member, t in g.members.items():
                if ended:
                    code, stopped = jobfiles.read_member_exit(t.handle.job_dir)
                    observed[member] = member_observation(obs, code, stopped, uid)
                else:  # the gang's record of its allocation is the whole gang's: a member bills its own request
                    observed[member] = member_observation(obs, None, False, uid)

    def _journal_for(self, job_dir: Path) -> Path:
        """``layout.changes_path(job_dir)``, one Path per parent directory (every Submit tracks a job: the
        pathlib calls cost more than the rest of ``track``)."""
        parent = os.path.dirname(job_dir)
        journal = self._journal_of.get(parent)
        if journal is None:
            journal = self._journal_of[parent] = layout.changes_path(job_dir)
        return journal

    def _drop_journal(self, t: Tracked) -> None:
        journal = self._journal_for(t.handle.job_dir)
        left = self._journals.get(journal, 0) - 1
        if left > 0:
            self._journals[journal] = left
        else:
            self._journals.pop(journal, None)

    async def poll_once(self) -> PollStats:
        """One batched backend poll for every tracked job; store and publish what changed."""
        async with self._one_at_a_time():
            return await self._poll()

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self) -> AsyncIterator[None]:
        if self._changes is None:
            yield  # a full poll stands alone: polls may overlap, as they always could
            return
        async with self._polling:
            yield

    async def _poll(self) -> PollStats:
        reg = self.registry()
        t0 = self.clock.monotonic()
        calls0 = self.backend.calls
        changes = self._changes
        async with self.lock:
            tracked = list(self.tracked.values())
            journals = list(self._journals)
            by_uid = dict(self.tracked) if changes is not None else {}
            restart = self._restart or not tracked
            added, removed = list(self._added.values()), self._removed
            self._added, self._removed = {}, []
            gangs = {uid: _Gang(g.handle, dict(g.members)) for uid, g in self._gangs.items()} if self._gangs else {}
            gangs_added, self._gangs_added = list(self._gangs_added.values()), {}
            self._restart = True  # until this poll is mapped: a poll that fails leaves the next one to start over
        if not tracked:
            observed: dict[str, Observation] = {}
        elif changes is None:
            observed = await self.backend.poll(self._handles(tracked, [g.handle for g in gangs.values()]))
        elif restart:
            all_gangs = [g.handle for g in gangs.values()]
            observed = await changes.poll_changes(self._handles(tracked, all_gangs), [], restart=True)
        else:
            observed = await changes.poll_changes(self._handles(added, gangs_added), removed, restart=False)
        if gangs:
            self._fan_out(observed, gangs, complete=changes is None or restart)
        now = self.clock.time()
        # Only what may have changed is looked at: every job after a full answer, else the jobs answered,
        # added, hinted, hot or swept (see the module's docstring).
        seen = None if changes is None or restart else (by_uid, added)
        # Files, mapping and serialisation run off the event loop: thousands of statuses changing at once must not
        # stall RPC handling. An idle pool (no job, no journal) has nothing to read: no hop (two wake-ups a poll).
        compute = functools.partial(self._compute, tracked, observed, now, journals, seen)
        updates, events, finished, ended = await asyncio.to_thread(compute) if tracked or journals else compute()
        self._restart = not tracked
        async with self.lock:
            # A job cancelled while we polled is no longer tracked: its tombstone must win.
            # One cancelled by another replica is caught by the registry: it never rewrites a tombstone.
            updates = [u for u in updates if u.uid in self.tracked]
            stored = await reg.save_statuses(updates)
            updates = [u for u in updates if u.uid in stored]
            for t in finished:
                if self.tracked.get(t.meta.uid) is t:
                    self.untrack(t.meta.uid)
                    self.files.forget(t.handle.job_dir)
            for u in updates:
                self.outbox.put(u.uid, events[u.uid])
        if updates:
            self.outbox.wake()
        if ended:  # after the statuses went out: on a shared file system each unlink may cost a round trip
            await asyncio.to_thread(jobfiles.remove_ended_layouts, ended)
        stats = PollStats(len(tracked), len(updates), self.backend.calls - calls0, self.clock.monotonic() - t0)
        self.last_poll = stats
        return stats

    def _candidates(
        self,
        tracked: list[Tracked],
        observed: dict[str, Observation],
        hinted: set[str],
        seen: tuple[dict[str, Tracked], list[Tracked]] | None,
    ) -> Iterator[tuple[Tracked, Observation, bool]]:
        """The jobs this poll looks at, each with its observation and whether its files are due a read.

        ``seen`` None: ``observed`` is complete (a job missing from it is GONE) and every job is
        looked at. Else ``observed`` holds only what changed (``ReportsChanges``): the jobs looked at
        are those it names, the added, hinted and hot ones, and this poll's sweep slice.
        """
        # This poll's sweep: positions [lo, hi) of the tracked list, wrapping around (those below ``wrap``).
        n = len(tracked)
        lo = self._sweep_at % n if n else 0
        hi = lo + min(-(-n // self.sweep_polls), self.sweep_max)
        wrap = hi - n
        self._sweep_at = hi
        if seen is None:
            self._hot.clear()  # every tracked job is looked at: the hot ones are noted again as they go by
            for i, t in enumerate(tracked):
                obs = observed.get(t.meta.uid, GONE)
                last = t.obs
                due = (
                    lo <= i < hi
                    or i < wrap
                    or (obs is not last and obs != last)
                    or t.files is None
                    or t.meta.uid in hinted
                )
                if due or t.hot:
                    yield t, obs, due
            return
        by_uid, added = seen
        self._hot.difference_update([uid for uid in self._hot if uid not in by_uid])  # untracked since
        swept = tracked[lo:hi] + tracked[: max(wrap, 0)]
        look: dict[str, Tracked] = {t.meta.uid: t for t in swept}
        for t in added:
            look[t.meta.uid] = t
        for uids in (observed, hinted, self._hot):
            for uid in uids:
                found = by_uid.get(uid)
                if found is not None:
                    look[uid] = found
        in_sweep = {t.meta.uid for t in swept}
        for t in sorted(look.values(), key=_by_seq):
            uid = t.meta.uid
            last = t.obs
            obs = observed.get(uid) or last or GONE
            due = uid in in_sweep or (obs is not last and obs != last) or t.files is None or uid in hinted
            if due or t.hot:
                yield t, obs, due

    def _compute(
        self,
        tracked: list[Tracked],
        observed: dict[str, Observation],
        now: float,
        journals: list[Path],
        seen: tuple[dict[str, Tracked], list[Tracked]] | None = None,
    ) -> tuple[list[StatusUpdate], dict[str, PendingEvent], list[Tracked], list[tuple[Path, bool]]]:
        """Map the changed jobs' inputs to their status; only this poll touches ``Tracked`` fields."""
        updates: list[StatusUpdate] = []
        events: dict[str, PendingEvent] = {}
        finished: list[Tracked] = []
        ended: list[tuple[Path, bool]] = []
        now_ns = self.clock.time_ns()
        # The journal before the files: a file written after this read leaves a line for the next one.
        # It names job directories, which are named by pod UID (``jobfiles.job_dir_for``).
        hinted = self.journal.read(journals)
        hot = self._hot
        for t, obs, due in self._candidates(tracked, observed, hinted, seen):
            t.obs = obs
            if not t.left_queue and obs.state is not BackendState.QUEUED:
                t.left_queue = True
                self.on_start(not _never_started(obs))
            if t.paths is None:  # string joins, not pathlib: every new job comes here once
                job_dir = t.handle.job_dir
                cdir = layout.containers_dir(job_dir)
                logs = {name: layout.log_file(cdir, name) for name in t.names}
                t.paths = (cdir, logs, os.fspath(self.backend.output_path(job_dir)))
            if due:
                t.files = self.files.read(t.handle.job_dir, t.names, t.paths[0])
            files = t.files or {}
            if obs.state is not BackendState.QUEUED:
                self._checkpoint_logs(t, files, now_ns)
            elif t.hot:
                t.hot -= 1  # no log to watch yet: a queued job cools down, so it is not looked at forever
            inputs = (obs, files)
            if inputs != t.inputs:
                t.inputs = inputs
                t.hot = HOT_POLLS
                self._plan(t, obs, files, now, updates, events, finished, ended)
            if t.hot:
                hot.add(t.meta.uid)
            else:
                hot.discard(t.meta.uid)
        return updates, events, finished, ended

    def _plan(
        self,
        t: Tracked,
        obs: Observation,
        files: dict[str, ContainerFiles],
        now: float,
        updates: list[StatusUpdate],
        events: dict[str, PendingEvent],
        finished: list[Tracked],
        ended: list[tuple[Path, bool]],  # (job dir, only what is left)
    ) -> None:
        """New inputs: run the pure plan and note the update, event, untracking and layout removal it asks for."""
        plan = plan_poll(t.meta, obs, files, last_status=t.status, revision=t.revision, now=now)
        if plan.untrack:
            finished.append(t)
        if plan.remove_layout and t.layout:
            ended.append((t.handle.job_dir, t.runner_layout))
        change = plan.change
        if change is None:
            return
        t.status = change.raw
        t.revision = change.revision
        updates.append(
            StatusUpdate(
                t.meta.uid, change.phase, int(change.status.state), change.raw, change.revision, change.finished_at
            )
        )
        change.status.updated_at = self.clock.utcnow()
        events[t.meta.uid] = self.outbox.event(change.status, change.revision, unstamped=change.raw)

    def _checkpoint_logs(self, t: Tracked, files: dict[str, ContainerFiles], now_ns: int) -> None:
        """Note the size of every log that may be growing (for GetLogs since_time/timestamps).

        A log that grew stays "hot" (checked at the next polls too); one that did not cools down.
        """
        assert t.paths is not None
        _, logs, output = t.paths
        sizes = t.log_sizes
        record = logindex.record
        grew = False
        paths = [path for name, path in logs.items() if (f := files.get(name)) is not None and f.started_at is not None]
        paths.append(output)
        for path in paths:
            before = sizes.get(path)
            after = record(path, now_ns, before)
            if after != before:
                sizes[path] = after
                grew = grew or after is not None
        if grew:
            t.hot = HOT_POLLS
        elif t.hot:
            t.hot -= 1


def _by_seq(t: Tracked) -> int:
    return t.seq
