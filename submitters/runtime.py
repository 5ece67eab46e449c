"""The submitter runtime: one process serving ``SubmitterService`` for one pool.

In-process API (what ``interlink-nats up`` uses)::

    settings = SubmitterSettings.load(config_file=None, pool="local", backend="shell",
                                      nats_url=["nats://127.0.0.1:4222"], state_dir=Path(...))
    async with Submitter(settings) as s:      # connects, recovers, serves; stops and drains on exit
        ...                                   # s.instance_id, s.describe(), await s.poll_once()
    await run_submitter(settings, stop_event) # serve until stop_event is set (or forever if None)

    Submitter(settings, *, nc=None, backend=None, clock=time.time)
      nc:      an already connected NATS client to use (then it is not drained/closed by us)
      backend: a Backend to use instead of the one named by settings.backend (tests, benchmarks)

What it does, and why in this order:
1. take the instance lock (``<state_dir>/instances/<id>.lock``, flock): replicas sharing the
   registry judge each other alive by it, so a crashed replica's jobs are adopted at once;
2. open the registry, start the backend, and recover every job this instance now owns
   (including jobs whose submission was interrupted: the backend reconciles them);
3. connect to NATS (forever, with back-off), make sure the events stream exists, serve RPC;
4. loop: one batched backend poll per interval → statuses → registry (one commit) → JobEvents
   (JetStream; unpublished ones are retried, so events resume after a NATS outage);
   announce BuildConfig and ResourceReport at start, periodically and when the config changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.subjects import (
    EVENTS_STREAM,
    config_subject,
    events_subject,
    resources_subject,
)
from interlink_nats.services.events import ensure_events_stream
from interlink_nats.submitters import fastwire, jobfiles, logindex
from interlink_nats.submitters.backends.base import (
    GONE,
    Backend,
    BackendError,
    BackendState,
    BackendUnavailable,
    Capacity,
    JobHandle,
    JobSpec,
    Observation,
    SubmitRejected,
)
from interlink_nats.submitters.batching import BatchRunner
from interlink_nats.submitters.registry import (
    ACTIVE,
    DELETED,
    DONE,
    SUBMITTING,
    JobRow,
    Registry,
    StatusUpdate,
)
from interlink_nats.submitters.service import SubmitterServiceImpl
from interlink_nats.submitters.settings import SubmitterSettings
from interlink_nats.submitters.status import (
    ContainerFiles,
    JobMeta,
    cancelled_status,
    is_terminal,
    map_status,
    submit_failed_status,
)
from nats.aio.client import Client as NATS

from interlink_nats import __version__

log = logging.getLogger(__name__)

PUBLISH_CONCURRENCY = 128
CONFIG_CHECK_INTERVAL = 2.0
ADOPT_EVERY_POLLS = 3


class SubmitterError(Exception):
    """The submitter could not start (state dir, registry, instance lock)."""


def make_backend(settings: SubmitterSettings) -> Backend:
    """The backend named by the settings (imported lazily: slurm code is not needed for shell)."""
    if settings.backend == "shell":
        from interlink_nats.submitters.backends.shell import ShellBackend

        return ShellBackend(
            max_concurrent=settings.shell.max_concurrent_jobs, bash=settings.shell.bash, kill_grace=settings.kill_grace
        )
    if settings.backend == "slurm":
        from interlink_nats.submitters.backends.slurm import SlurmBackend

        return SlurmBackend(settings.slurm)
    raise SubmitterError(f"unknown backend {settings.backend!r}")


@dataclass(slots=True)
class _Tracked:
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


class _InstanceLock:
    """An flock held for the life of the process: its absence tells replicas we are gone."""

    def __init__(self, directory: Path, instance_id: str) -> None:
        self.path = directory / f"{instance_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SubmitterError(f"instance id already in use here: {self.path}") from exc
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def is_dead(directory: Path, instance_id: str) -> bool:
        """True when no live process holds ``instance_id``'s lock on this host."""
        path = directory / f"{instance_id}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        else:
            with contextlib.suppress(OSError):
                path.unlink()
            return True
        finally:
            os.close(fd)


def _meta_from_row(row: JobRow, pool: str, backend: str) -> JobMeta:
    return JobMeta(row.uid, row.namespace, row.name, pool, row.job_id, row.init_containers, row.containers, backend)


def _now_ts() -> dt.datetime:
    return dt.datetime.now(tz=dt.UTC)


class Submitter:
    """One pool's submitter: registry + backend + NATS. See the module docstring."""

    def __init__(
        self,
        settings: SubmitterSettings,
        *,
        nc: NATS | None = None,
        backend: Backend | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.pool = settings.pool
        self.instance_id = settings.resolved_instance_id()
        self.state_dir = settings.resolved_state_dir()
        self.backend: Backend = backend if backend is not None else make_backend(settings)
        self.clock = clock
        self.started_at = _now_ts()
        self.nc: NATS | None = nc
        self._own_nc = nc is None
        self.registry: Registry | None = None
        self.build_config = pb.BuildConfig()
        self._config_mtime: float | None = None
        self._capacity = Capacity()
        self._report: pb.ResourceReport | None = None
        self._lock = _InstanceLock(self.state_dir / "instances", self.instance_id)
        self._tracked: dict[str, _Tracked] = {}
        self._inflight: dict[str, asyncio.Task[pb.SubmitResponse]] = {}
        self._unpublished: dict[str, pb.JobEvent] = {}
        self._files = jobfiles.ContainerFilesCache()
        self._job_dirs: BatchRunner[tuple[Path, str], Path] = BatchRunner(
            jobfiles.prepare_job_dirs, name="submitter-job-dirs"
        )
        self._poll_lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()
        self._wake_publisher = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._rpc: Any = None
        self._stream_ready = False
        self._polls = 0
        self._recover_needed = False
        self._waiting_retry: set[str] = set()
        self.last_poll: PollStats | None = None

    # Lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Submitter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, stop: asyncio.Event | None = None) -> None:
        """Recover, connect and serve. ``stop`` aborts a connect that is still retrying."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            (self.state_dir / "jobs").mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise SubmitterError(f"cannot create state dir {self.state_dir}: {exc}") from exc
        self._lock.acquire()
        self._job_dirs = BatchRunner(jobfiles.prepare_job_dirs, name="submitter-job-dirs")  # fresh after a stop
        try:
            self.registry = await Registry.open(self.settings.resolved_registry_path())
            self._reload_build_config(force=True)
            await self.backend.start()
            await self._adopt_dead_owners()
            await self._recover()
            for row in await self.registry.unpublished(self.instance_id):
                status = row.job_status()
                if status is not None:
                    self._unpublished[row.uid] = self._event(status, row.revision)
            if self.nc is None:
                from interlink_nats.submitters.natsconn import connect

                self.nc = await connect(
                    self.settings,
                    name=f"interlink-submitter-{self.pool}-{self.instance_id}",
                    stop=stop,
                    on_reconnect=self._on_reconnect,
                )
            await self._ensure_stream()
            from interlink_nats.services.rpc import RpcServer

            self._rpc = RpcServer(
                self.nc,
                [SubmitterServiceImpl(self)],
                pool=self.pool,
                max_concurrency=self.settings.max_concurrency,
                metadata={"backend": self.backend.name, "instance": self.instance_id},
            )
            await self._rpc.start()
            self._capacity = await self._discover_capacity()
            await self.announce()
        except BaseException:
            await self._shutdown(drain=False)
            raise
        self._tasks = [
            asyncio.create_task(self._poll_loop(), name="submitter-poll"),
            asyncio.create_task(self._announce_loop(), name="submitter-announce"),
            asyncio.create_task(self._publish_loop(), name="submitter-publish"),
        ]
        log.info(
            "submitter %s serving pool %s with backend %s (state %s)",
            self.instance_id,
            self.pool,
            self.backend.name,
            self.state_dir,
        )

    async def stop(self) -> None:
        """Stop serving (in-flight calls finish), flush events, drain NATS. Jobs keep running."""
        await self._shutdown(drain=True)

    async def _shutdown(self, *, drain: bool) -> None:
        self._stop.set()
        if self._rpc is not None:
            with contextlib.suppress(Exception):
                await self._rpc.stop(grace=self.settings.drain_timeout / 2)
            self._rpc = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self._inflight:
            await asyncio.wait(list(self._inflight.values()), timeout=self.settings.drain_timeout / 2)
        if drain and self.nc is not None and self.nc.is_connected and self.registry is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.publish_pending(), timeout=5)
        with contextlib.suppress(Exception):
            await self.backend.close()
        with contextlib.suppress(Exception):
            await self._job_dirs.close()
        if self.nc is not None and self._own_nc:
            with contextlib.suppress(Exception):
                if drain and self.nc.is_connected:
                    await self.nc.drain()
                else:
                    await self.nc.close()
            self.nc = None
        if self.registry is not None:
            with contextlib.suppress(Exception):
                await self.registry.close()
            self.registry = None
        self._lock.release()

    async def _on_reconnect(self) -> None:
        self._stream_ready = False
        self._wake_publisher.set()

    def _reg(self) -> Registry:
        if self.registry is None:
            raise GRPCError(Status.UNAVAILABLE, "submitter is not running")
        return self.registry

    # Recovery -------------------------------------------------------------------------------

    async def _adopt_dead_owners(self) -> int:
        reg = self._reg()
        adopted = 0
        lock_dir = self.state_dir / "instances"
        for owner in await reg.owners():
            if owner != self.instance_id and await asyncio.to_thread(_InstanceLock.is_dead, lock_dir, owner):
                n = await reg.adopt(owner, self.instance_id)
                if n:
                    log.info("adopted %d jobs of stopped instance %s", n, owner)
                adopted += n
        return adopted

    async def _recover(self) -> None:
        """Track every live job this instance owns that it is not tracking yet."""
        reg = self._reg()
        busy = self._tracked.keys() | self._inflight.keys()
        rows = [r for r in await reg.live(self.instance_id) if r.uid not in busy]
        for row in await reg.unpublished(self.instance_id):
            status = row.job_status()
            if status is not None and row.uid not in self._unpublished:
                self._unpublished[row.uid] = self._event(status, row.revision)
        if not rows:
            return
        found = await self.backend.reconcile([JobHandle(r.uid, r.job_dir, r.job_id) for r in rows])
        for row in rows:
            outcome = found.get(row.uid)
            job_id = outcome.job_id if outcome is not None else None
            if job_id is None:
                script = row.job_dir / "job.sh"
                if not await asyncio.to_thread(script.exists):
                    if row.uid not in self._waiting_retry:
                        self._waiting_retry.add(row.uid)
                        log.warning("job %s was interrupted before its script was stored; waiting for a retry", row.uid)
                    continue
                try:
                    job_id = await self.backend.submit(self._spec(row, row.job_spec()))
                except BackendError as exc:
                    log.warning("resubmitting interrupted job %s failed: %s", row.uid, exc)
                    continue
            if row.phase == SUBMITTING or row.job_id != job_id:
                await reg.mark_submitted(row.uid, job_id)
                row.job_id = job_id
            self._track(row)
        log.info("tracking %d jobs after recovery", len(self._tracked))

    def _spec(self, row: JobRow, job: pb.JobScript) -> JobSpec:
        return JobSpec(
            uid=row.uid,
            job_dir=row.job_dir,
            script=row.job_dir / "job.sh",
            resources=job.resources,
            backend_flags=tuple(job.backend_flags),
            namespace=row.namespace,
            name=row.name,
        )

    def _track(self, row: JobRow) -> _Tracked:
        meta = _meta_from_row(row, self.pool, self.backend.name)
        t = _Tracked(
            meta,
            JobHandle(row.uid, row.job_dir, row.job_id),
            (*row.init_containers, *row.containers),
            row.status,
            row.revision,
        )
        self._tracked[row.uid] = t
        return t

    # Submit ---------------------------------------------------------------------------------

    async def submit(self, job: pb.JobScript) -> pb.SubmitResponse:
        """Idempotent by pod UID; the work is shielded so a caller's deadline cannot interrupt it."""
        pod = job.pod or pb.PodRef()
        try:
            jobfiles.validate_uid(pod.uid)
            names = [*job.init_containers, *job.containers]
            if not job.containers:
                raise jobfiles.InvalidJobError("a job needs at least one container")
            for name in names:
                jobfiles.validate_container(name)
            if len(set(names)) != len(names):
                raise jobfiles.InvalidJobError("container names must be unique")
        except jobfiles.InvalidJobError as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None
        if not job.script.strip():
            raise GRPCError(Status.INVALID_ARGUMENT, "the job script is empty")
        if self._stop.is_set():
            raise GRPCError(Status.UNAVAILABLE, "submitter is stopping")
        running = self._inflight.get(pod.uid)
        if running is not None:
            resp = await asyncio.shield(running)
            return pb.SubmitResponse(job_id=resp.job_id, created=False, status=resp.status)
        task = asyncio.ensure_future(self._submit(job))
        self._inflight[pod.uid] = task
        task.add_done_callback(lambda _t: self._inflight.pop(pod.uid, None))
        return await asyncio.shield(task)

    async def _submit(self, job: pb.JobScript) -> pb.SubmitResponse:
        """Claim (durable intent) → job directory → backend → mark submitted; see the module docstring.

        Hot path: the claim and the mark each wait for a group commit shared with every concurrent
        Submit, the job directory is written in a batch with theirs on one thread, and the two
        messages the registry keeps (spec, pending status) are encoded by ``fastwire``.
        """
        reg = self._reg()
        pod = job.pod or pb.PodRef()
        job_dir = jobfiles.job_dir_for(self.state_dir, pod.uid)
        spec_msg = pb.JobScript(
            pod=job.pod,
            init_containers=job.init_containers,
            containers=job.containers,
            resources=job.resources,
            backend_flags=job.backend_flags,
        )
        meta = JobMeta(
            pod.uid,
            pod.namespace,
            pod.name,
            self.pool,
            "",
            tuple(job.init_containers),
            tuple(job.containers),
            self.backend.name,
        )
        created, row = await reg.claim(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            owner=self.instance_id,
            job_dir=job_dir,
            init_containers=job.init_containers,
            containers=job.containers,
            spec=fastwire.job_spec(job),
            status=fastwire.pending_status(
                pod.uid, pod.namespace, pod.name, self.pool, job.init_containers, job.containers
            ),
        )
        if not created:
            resumable = row.phase == SUBMITTING and (
                row.owner == self.instance_id
                or await asyncio.to_thread(_InstanceLock.is_dead, self.state_dir / "instances", row.owner)
            )
            if not resumable:
                return pb.SubmitResponse(job_id=row.job_id, created=False, status=row.job_status())
            if row.owner != self.instance_id:
                await reg.adopt(row.owner, self.instance_id)
                self._recover_needed = True  # the rest of the dead owner's jobs: tracked on the next poll
            found = await self.backend.reconcile([JobHandle(row.uid, row.job_dir, row.job_id)])
            outcome = found.get(row.uid)
            if outcome is not None and outcome.job_id is not None:
                await reg.mark_submitted(row.uid, outcome.job_id)
                row.job_id = outcome.job_id
                self._track(row)
                return pb.SubmitResponse(job_id=row.job_id, created=False, status=row.job_status())
        try:
            await self._job_dirs.run((job_dir, job.script))
        except OSError as exc:
            raise GRPCError(Status.UNAVAILABLE, f"cannot write the job directory: {exc}") from None
        try:
            job_id = await self.backend.submit(self._spec(row, spec_msg))
        except SubmitRejected as exc:
            status = submit_failed_status(meta, str(exc), now=self.clock())
            await self._record_final(row, status)
            raise GRPCError(Status.FAILED_PRECONDITION, f"{self.backend.name} refused the job: {exc}") from None
        except BackendUnavailable as exc:
            raise GRPCError(Status.UNAVAILABLE, f"{self.backend.name} is unavailable: {exc}") from None
        except BackendError as exc:
            raise GRPCError(Status.UNAVAILABLE, f"{self.backend.name} submission failed: {exc}") from None
        await reg.mark_submitted(row.uid, job_id)
        row.job_id = job_id
        async with self._poll_lock:
            self._track(row)
        if created:
            return pb.SubmitResponse(job_id=job_id, created=True)  # pending; the caller knows the containers
        pending = map_status(dataclasses.replace(meta, job_id=job_id), None, {}, now=self.clock())
        return pb.SubmitResponse(job_id=job_id, created=False, status=pending)

    async def _record_final(self, row: JobRow, status: pb.JobStatus) -> None:
        revision = row.revision + 1
        await self._reg().save_statuses(
            [StatusUpdate(row.uid, DONE, int(status.state), bytes(status), revision, self.clock())]
        )
        self._unpublished[row.uid] = self._event(status, revision)
        self._wake_publisher.set()

    # Status, cancel, list ---------------------------------------------------------------------

    async def get_status(self, uids: Sequence[str]) -> pb.GetStatusResponse:
        rows = await self._reg().get_many(list(dict.fromkeys(uids)))
        statuses, unknown = [], []
        for uid in dict.fromkeys(uids):
            row = rows.get(uid)
            status = row.job_status() if row is not None else None
            if status is None:
                unknown.append(uid)
            else:
                statuses.append(status)
        return pb.GetStatusResponse(statuses=statuses, unknown_pod_uids=unknown)

    async def cancel(self, uid: str) -> pb.CancelResponse:
        """Stop the job, remove its files, keep a tombstone (so it never runs again). Idempotent."""
        reg = self._reg()
        running = self._inflight.get(uid)
        if running is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
        row = await reg.get(uid)
        if row is None:
            return pb.CancelResponse(found=False)
        if row.phase == DELETED:
            return pb.CancelResponse(found=True, status=row.job_status())
        async with self._poll_lock:
            self._tracked.pop(uid, None)
        if row.phase in (SUBMITTING, ACTIVE):
            try:
                await self.backend.cancel(JobHandle(row.uid, row.job_dir, row.job_id))
            except BackendError as exc:
                raise GRPCError(Status.UNAVAILABLE, f"cannot cancel job {row.job_id or uid}: {exc}") from None
        meta = _meta_from_row(row, self.pool, self.backend.name)
        status = cancelled_status(meta, row.job_status(), now=self.clock())
        revision = row.revision + 1
        await reg.mark_deleted(uid, bytes(status), int(status.state), revision)
        self._files.forget(row.job_dir)
        await asyncio.to_thread(jobfiles.remove_job_dir, row.job_dir)
        self._unpublished[uid] = self._event(status, revision)
        self._wake_publisher.set()
        return pb.CancelResponse(found=True, status=status)

    async def list_jobs(self, req: pb.ListJobsRequest) -> pb.ListJobsResponse:
        size = min(req.page_size or 500, 5000)
        rows = await self._reg().page(include_finished=req.include_finished, after=req.page_token, limit=size + 1)
        more = len(rows) > size
        rows = rows[:size]
        jobs = [s for s in (r.job_status() for r in rows) if s is not None]
        return pb.ListJobsResponse(jobs=jobs, next_page_token=rows[-1].uid if more and rows else "")

    def describe(self) -> pb.DescribeResponse:
        return pb.DescribeResponse(
            pool=self.pool,
            build_config=self.build_config,
            resources=self.resource_report(),
            backend=self.backend.name,
            version=__version__,
            instance_id=self.instance_id,
            started_at=self.started_at,
        )

    # Polling ----------------------------------------------------------------------------------

    async def poll_once(self) -> PollStats:
        """One batched backend poll for every tracked job; store and publish what changed."""
        reg = self._reg()
        t0 = time.perf_counter()
        calls0 = self.backend.calls
        async with self._poll_lock:
            tracked = list(self._tracked.values())
        observed = await self.backend.poll([t.handle for t in tracked]) if tracked else {}
        now = self.clock()
        # Files, mapping and serialisation run off the event loop: thousands of statuses changing
        # at once must not stall RPC handling.
        updates, events, finished = await asyncio.to_thread(self._compute, tracked, observed, now)
        async with self._poll_lock:
            # A job cancelled while we polled is no longer tracked: its tombstone must win.
            updates = [u for u in updates if u.uid in self._tracked]
            await reg.save_statuses(updates)
            for t in finished:
                if self._tracked.get(t.meta.uid) is t:
                    del self._tracked[t.meta.uid]
                    self._files.forget(t.handle.job_dir)
            for u in updates:
                self._unpublished[u.uid] = events[u.uid]
        if updates:
            self._wake_publisher.set()
        stats = PollStats(len(tracked), len(updates), self.backend.calls - calls0, time.perf_counter() - t0)
        self.last_poll = stats
        return stats

    def _compute(
        self, tracked: list[_Tracked], observed: dict[str, Observation], now: float
    ) -> tuple[list[StatusUpdate], dict[str, pb.JobEvent], list[_Tracked]]:
        """Map every tracked job's inputs to its status; only this poll touches ``_Tracked`` fields."""
        updates: list[StatusUpdate] = []
        events: dict[str, pb.JobEvent] = {}
        finished: list[_Tracked] = []
        now_ns = time.time_ns()
        for t in tracked:
            files = self._files.read(t.handle.job_dir, t.names)
            obs = observed.get(t.meta.uid, GONE)
            if obs.state is not BackendState.QUEUED:
                self._checkpoint_logs(t, files, now_ns)
            inputs = (obs, files)
            if inputs == t.inputs:
                continue  # map_status is pure: nothing new to say (the common case, by far)
            t.inputs = inputs
            status = map_status(t.meta, obs, files, now=now)
            raw = bytes(status)
            terminal = is_terminal(status.state)
            if terminal:
                finished.append(t)
            if raw == t.status:
                continue
            t.status = raw
            t.revision += 1
            updates.append(
                StatusUpdate(
                    t.meta.uid,
                    DONE if terminal else ACTIVE,
                    int(status.state),
                    raw,
                    t.revision,
                    now if terminal else None,
                )
            )
            status.updated_at = _now_ts()
            events[t.meta.uid] = self._event(status, t.revision)
        return updates, events, finished

    def _checkpoint_logs(self, t: _Tracked, files: dict[str, ContainerFiles], now_ns: int) -> None:
        """Note the size of every log that may be growing (for GetLogs since_time/timestamps)."""
        job_dir = t.handle.job_dir
        paths = [layout.log_path(job_dir, n) for n in t.names if n in files and files[n].started_at is not None]
        paths.append(self.backend.output_path(job_dir))
        for path in paths:
            t.log_sizes[path] = logindex.record(path, now_ns, t.log_sizes.get(path))

    async def _poll_loop(self) -> None:
        interval = self.settings.poll_interval
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                await self.poll_once()
                self._polls += 1
                if self._recover_needed:
                    self._recover_needed = False
                    await self._recover()
                if self._polls % ADOPT_EVERY_POLLS == 0:
                    if await self._adopt_dead_owners():
                        await self._recover()
                    elif self._polls % (ADOPT_EVERY_POLLS * 20) == 0:
                        await self._recover()  # picks up interrupted submissions whose retry came back
                if self._polls % 1000 == 1:
                    cutoff = self.clock() - self.settings.retention_days * 86400
                    await self._reg().prune(cutoff)
            except BackendError as exc:
                log.warning("%s poll failed (%s); retrying next interval", self.backend.name, exc)
            except Exception:
                log.exception("poll failed; retrying next interval")
            delay = max(0.0, interval - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    # Events -----------------------------------------------------------------------------------

    def _event(self, status: pb.JobStatus, revision: int) -> pb.JobEvent:
        if status.updated_at is None:
            status.updated_at = _now_ts()
        return pb.JobEvent(status=status, revision=revision, instance_id=self.instance_id)

    async def _ensure_stream(self) -> None:
        """Make sure the events stream exists (the definition is shared with the gateway).

        A pool credential may only look the stream up, not create it (the gateway does), so a
        lookup comes first; a failure is only logged: unacked events stay pending and retried.
        """
        assert self.nc is not None
        js = self.nc.jetstream(timeout=5)
        self._stream_ready = True
        try:
            await js.stream_info(EVENTS_STREAM)
            return
        except nats.js.errors.NotFoundError:
            pass
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("cannot look up stream %s (%s); events wait until it is there", EVENTS_STREAM, exc)
            return
        try:
            await ensure_events_stream(js, self.settings.subject_prefix)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("cannot create stream %s (%s); events wait until the gateway creates it", EVENTS_STREAM, exc)

    async def publish_pending(self) -> int:
        """Publish every unpublished event (newest revision per pod); returns how many went out."""
        async with self._publish_lock:
            if not self._unpublished or self.nc is None or not self.nc.is_connected:
                return 0
            if not self._stream_ready:
                await self._ensure_stream()
            js = self.nc.jetstream()
            subject = events_subject(self.pool, self.settings.subject_prefix)
            batch = list(self._unpublished.items())
            sem = asyncio.Semaphore(PUBLISH_CONCURRENCY)
            failed = asyncio.Event()

            async def one(uid: str, event: pb.JobEvent) -> tuple[str, int] | None:
                async with sem:
                    if failed.is_set():
                        return None
                    try:
                        await js.publish(subject, bytes(event), timeout=5)
                    except (nats.errors.Error, TimeoutError) as exc:
                        if not failed.is_set():
                            log.warning("publishing events paused: %s", exc)
                        failed.set()
                        return None
                    return uid, event.revision

            done = [d for d in await asyncio.gather(*(one(u, e) for u, e in batch)) if d is not None]
            for uid, rev in done:
                current = self._unpublished.get(uid)
                if current is not None and current.revision == rev:
                    del self._unpublished[uid]
            if done and self.registry is not None:
                await self.registry.mark_published(done)
            return len(done)

    async def _publish_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_publisher.wait(), self.settings.poll_interval)
            self._wake_publisher.clear()
            try:
                await self.publish_pending()
            except Exception:
                log.exception("publishing events failed; retrying")

    # Announcements ----------------------------------------------------------------------------

    def _reload_build_config(self, *, force: bool = False) -> bool:
        """Re-read the BuildConfig when its file changed; True when it did.

        A broken file at start is fatal (nothing sensible to announce); later it is logged and
        the previous BuildConfig stays in force.
        """
        path, _ = self.settings.build_config_source()
        mtime = None
        if path is not None:
            try:
                mtime = path.stat().st_mtime
            except OSError:
                mtime = None
        if not force and mtime == self._config_mtime:
            return False
        self._config_mtime = mtime
        try:
            config = self.settings.read_build_config()
            self.backend.configure(config)
        except ValueError as exc:  # ConfigFileError, or flags the backend refuses
            if force:
                raise SubmitterError(f"invalid BuildConfig: {exc}") from exc
            log.error("keeping the previous BuildConfig: %s", exc)
            return False
        self.build_config = config
        return True

    async def _discover_capacity(self) -> Capacity:
        try:
            return await self.backend.capacity()
        except BackendError as exc:
            log.warning("cannot discover capacity (%s); announcing the configured one", exc)
            return self._capacity

    def resource_report(self) -> pb.ResourceReport:
        capacity = self._capacity.quantities()
        capacity.setdefault("pods", "1000")
        capacity.update(self.settings.capacity)
        return pb.ResourceReport(
            pool=self.pool,
            capacity=capacity,
            labels=dict(self.settings.labels),
            taints=self.settings.report_taints(),
            reported_at=_now_ts(),
            backend=self.backend.name,
            interval_seconds=int(self.settings.announce_interval),
        )

    async def announce(self) -> None:
        """Publish BuildConfig and ResourceReport (core NATS: listeners want the latest only)."""
        if self.nc is None or not self.nc.is_connected:
            return
        prefix = self.settings.subject_prefix
        try:
            await self.nc.publish(config_subject(self.pool, prefix), bytes(self.build_config))
            await self.nc.publish(resources_subject(self.pool, prefix), bytes(self.resource_report()))
        except nats.errors.Error as exc:
            log.warning("announcement failed: %s", exc)

    async def _announce_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), CONFIG_CHECK_INTERVAL)
            try:
                changed = await asyncio.to_thread(self._reload_build_config)
                due = time.monotonic() - last >= self.settings.announce_interval
                if due:
                    self._capacity = await self._discover_capacity()
                if changed or due:
                    await self.announce()
                    last = time.monotonic()
            except Exception:
                log.exception("announcement loop error")

    # Introspection ----------------------------------------------------------------------------

    @property
    def tracked(self) -> int:
        return len(self._tracked)

    @property
    def unpublished(self) -> int:
        return len(self._unpublished)


async def run_submitter(settings: SubmitterSettings, stop_event: asyncio.Event | None = None) -> None:
    """Serve until ``stop_event`` is set (forever when None), then stop gracefully."""
    stop_event = stop_event or asyncio.Event()
    submitter = Submitter(settings)
    try:
        await submitter.start(stop=stop_event)
    except Exception as exc:
        from interlink_nats.submitters.natsconn import NatsConnectError

        if isinstance(exc, NatsConnectError):
            return
        raise
    try:
        await stop_event.wait()
    finally:
        await submitter.stop()
