"""Helpers for tests and benchmarks of submitters (shipped in the library, like grpclib.testing).

* :class:`FakeBackend`: an in-memory batch system implementing ``backends.base.Backend``,
  scriptable: crash before/after any backend call, slow or failing calls, jobs that vanish,
  stale (duplicate) reports. With :func:`offline_submitter` and :func:`crash`, crash, adoption,
  cancel and replica races run in milliseconds, without NATS or processes.
* :func:`settings_for`, :func:`wait_for`: settings for a test pool, and polling with a deadline.

Pods rendered with the real renderer live in ``tests/harness/jobs.py``: submitters do not import
pod rendering.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import Clock
from interlink_nats.submitters.core.backend import (
    BackendError,
    BackendState,
    BatchCommand,
    Capacity,
    GangSpec,
    JobHandle,
    JobSpec,
    Observation,
    Reconciled,
)
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings

T = TypeVar("T")


def settings_for(
    state_dir: Path, nats_url: str | Sequence[str], *, pool: str = "test", backend: str = "shell", **kw: Any
) -> SubmitterSettings:
    urls = [nats_url] if isinstance(nats_url, str) else list(nats_url)
    if "poll_interval" not in kw:  # the old name, still accepted
        kw.setdefault("poll_interval_s", 0.2)
    return SubmitterSettings.load(None, pool=pool, backend=backend, nats={"url": urls}, state_dir=state_dir, **kw)


async def wait_for(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 20.0,  # noqa: ASYNC109 - a polling budget, not a cancellation scope
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Await ``check()`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class SimulatedCrash(BaseException):
    """The submitter "dies" here. A BaseException, so no ``except Exception`` in the runtime swallows it."""


@dataclass(slots=True)
class FakeJob:
    uid: str
    job_id: str
    job_dir: Path
    state: BackendState = BackendState.QUEUED
    exit_code: int | None = None
    cancelled: bool = False


@dataclass(slots=True)
class _Script:
    crash_before: int = 0
    crash_after: int = 0
    failures: deque[BackendError] = field(default_factory=deque)
    delay: float = 0.0
    hold: Hold | None = None


@dataclass(slots=True)
class Hold:
    """A backend call parked on purpose: ``entered`` is set when it arrives, it goes on at ``release``."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class FakeBackend:
    """An in-memory batch system; it outlives the submitters that use it, as a real one does.

    Every backend call first obeys its script (``op`` is ``submit``, ``submit_gang``, ``find_gang``,
    ``reconcile``, ``poll``, ``cancel`` or ``capacity``): wait ``slow`` seconds, raise a queued failure, or crash
    before/after doing the work. ``after`` a submit means the batch system has the job but the
    submitter never heard its id: the hard case for recovery.
    """

    name = "fake"

    def __init__(self, capacity: Capacity | None = None) -> None:
        self.jobs: dict[str, FakeJob] = {}
        """Backend id → job; one pod submitted twice shows up twice (see :meth:`submissions`)."""
        self.calls = 0
        self.build_config = pb.BuildConfig()
        self.cancels: list[str] = []
        self._capacity = capacity or Capacity(cpu_millis=4000, memory_bytes=8 * 2**30)
        self._scripts: dict[str, _Script] = defaultdict(_Script)
        self._ids = itertools.count(1)
        self._stale: dict[str, deque[Observation]] = defaultdict(deque)
        self.programs: list[BatchCommand] = []
        """What :meth:`commands` declares (none: an in-memory batch system runs no program)."""

    # Scripting -------------------------------------------------------------------------------

    def crash(self, op: str, *, after: bool = False, times: int = 1) -> None:
        """The next ``times`` calls of ``op`` raise :class:`SimulatedCrash` (``after`` doing the work)."""
        script = self._scripts[op]
        if after:
            script.crash_after += times
        else:
            script.crash_before += times

    def fail(self, op: str, error: BackendError, *, times: int = 1) -> None:
        """The next ``times`` calls of ``op`` raise ``error`` without doing the work."""
        self._scripts[op].failures.extend([error] * times)

    def slow(self, op: str, seconds: float) -> None:
        """Every call of ``op`` takes ``seconds`` first (0 to stop)."""
        self._scripts[op].delay = seconds

    def hold(self, op: str) -> Hold:
        """The next call of ``op`` waits at its start until released: a race made deterministic."""
        hold = self._scripts[op].hold = Hold()
        return hold

    def vanish(self, uid: str) -> None:
        """The batch system forgets every job of ``uid`` (purged, node lost)."""
        for job_id in [j.job_id for j in self.jobs.values() if j.uid == uid]:
            del self.jobs[job_id]

    def start_running(self, uid: str) -> None:
        for job in self.submissions(uid):
            job.state = BackendState.RUNNING

    def finish(self, uid: str, state: BackendState = BackendState.COMPLETED, exit_code: int | None = 0) -> None:
        for job in self.submissions(uid):
            job.state = state
            job.exit_code = exit_code

    def report_stale(self, uid: str, observation: Observation, *, times: int = 1) -> None:
        """The next ``times`` polls report ``observation`` for ``uid`` again (an old or duplicate report)."""
        self._stale[uid].extend([observation] * times)

    def submissions(self, uid: str) -> list[FakeJob]:
        """Every job the batch system holds for ``uid``: more than one means the pod ran twice."""
        return [j for j in self.jobs.values() if j.uid == uid]

    async def _obey(self, op: str) -> _Script:
        self.calls += 1
        script = self._scripts[op]
        if script.hold is not None:
            hold, script.hold = script.hold, None
            hold.entered.set()
            await hold.release.wait()
        if script.delay:
            await asyncio.sleep(script.delay)
        if script.failures:
            raise script.failures.popleft()
        if script.crash_before:
            script.crash_before -= 1
            raise SimulatedCrash(f"crash before {op}")
        return script

    @staticmethod
    def _maybe_crash_after(op: str, script: _Script) -> None:
        if script.crash_after:
            script.crash_after -= 1
            raise SimulatedCrash(f"crash after {op}")

    # Backend ---------------------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def configure(self, build_config: pb.BuildConfig) -> None:
        self.build_config = build_config

    async def submit(self, spec: JobSpec) -> str:
        return await self._accept("submit", spec.uid, spec.job_dir)

    async def submit_gang(self, gang: GangSpec) -> str:
        """``RunsGangs``: a gang is ONE job held under its group uid (``submissions(gang.uid)``)."""
        return await self._accept("submit_gang", gang.uid, gang.job_dir)

    async def _accept(self, op: str, uid: str, job_dir: Path) -> str:
        """A new job held under ``uid``, as the script set for ``op`` lets it."""
        script = await self._obey(op)
        job_id = f"fake-{next(self._ids)}"
        self.jobs[job_id] = FakeJob(uid, job_id, job_dir)
        self._maybe_crash_after(op, script)
        return job_id

    async def find_gang(self, gang: GangSpec) -> Reconciled:
        script = await self._obey("find_gang")
        found = self._found(gang.uid)
        self._maybe_crash_after("find_gang", script)
        return found

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]:
        script = await self._obey("reconcile")
        out = {handle.uid: self._found(handle.uid) for handle in jobs}
        self._maybe_crash_after("reconcile", script)
        return out

    def _found(self, uid: str) -> Reconciled:
        """The latest job held under ``uid``, as a backend that names jobs by pod uid finds it."""
        held = self.submissions(uid)
        return Reconciled(held[-1].job_id if held else None)

    async def poll(self, jobs: Sequence[JobHandle]) -> dict[str, Observation]:
        script = await self._obey("poll")
        out: dict[str, Observation] = {}
        for handle in jobs:
            stale = self._stale.get(handle.uid)
            if stale:
                out[handle.uid] = stale.popleft()
                continue
            job = self.jobs.get(handle.job_id)
            if job is not None:
                out[handle.uid] = Observation(job.state, exit_code=job.exit_code, raw_state=job.state.name)
        self._maybe_crash_after("poll", script)
        return out

    async def cancel(self, job: JobHandle) -> None:
        script = await self._obey("cancel")
        self.cancels.append(job.uid)
        for held in self.submissions(job.uid):
            if not held.state.terminal:
                held.state = BackendState.CANCELLED
                held.cancelled = True
        self._maybe_crash_after("cancel", script)

    async def capacity(self) -> Capacity:
        await self._obey("capacity")
        return self._capacity

    def commands(self) -> list[BatchCommand]:
        return list(self.programs)

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / "job.out"


# Submitters without NATS -----------------------------------------------------------------------


def offline_settings(state_dir: Path, *, instance_id: str, pool: str = "test") -> SubmitterSettings:
    """Settings for a submitter that never connects (its NATS URL points nowhere)."""
    return settings_for(state_dir, "nats://127.0.0.1:1", pool=pool, instance_id=instance_id)


@contextlib.asynccontextmanager
async def offline_submitter(
    state_dir: Path, backend: FakeBackend, *, instance_id: str, clock: Clock | None = None
) -> AsyncIterator[Submitter]:
    """A ``Submitter`` that did everything but connect to NATS (lock, registry, adoption, recovery).

    Events stay in its outbox (``s.outbox.pending``). Stopped on exit unless :func:`crash` ran.
    """
    sub = Submitter(offline_settings(state_dir, instance_id=instance_id), backend=backend, clock=clock)
    await sub.open()
    try:
        yield sub
    finally:
        if sub.registry is not None:
            await sub.stop()


async def crash(sub: Submitter) -> None:
    """Leave ``sub`` as kill -9 would: committed rows stay, in-memory state and the instance lock go."""
    for task in [*sub.submissions.inflight.values(), *sub.gangs.inflight.values()]:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    with contextlib.suppress(Exception):
        await sub.submissions.job_dirs.close()
    if sub.registry is not None:
        await sub.registry.close()
        sub.registry = None
    sub.instance_lock.release()
