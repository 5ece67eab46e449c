"""The ``shell`` backend: each job is ``bash job.sh`` on this host, detached from the submitter.

Why detached: a submitter restart (or crash) must not kill running pods. One long-lived launcher (a small bash in its
own session, started once) reads job directories on its stdin; for each it claims the directory and starts the runner
in the background, in a process group of its own, then answers with the runner's pid. The runner keeps going when the
submitter (and then the launcher, at end of input) goes away. The job is found again by its pid file, checked against
``/proc/<pid>/cmdline`` (and its start time once seen), so a recycled pid is never mistaken for the job. Why one
launcher, not a process per job: :mod:`.processes`. A pod group is one job (:mod:`.gang`).

Why "run at most once" holds: each launch starts with ``mkdir .shell.claim``, atomic on every
POSIX filesystem; a second launch of the same directory (a retry after a crash, or a second
launcher) loses the race and starts nothing. The claim and the start of the runner happen in
the launcher, which finishes every directory it was sent even if the submitter is killed. Only a
launcher killed between the two (its container restarted) leaves a claim without a runner; the
poll reports that job lost, saying it never started, on its second sighting (``NEVER_STARTED_AFTER``).

Cancel: a TERM at once, then the job's whole process tree KILLed at the site's longest grace (:mod:`.stopping`);
the tree is every process below the runner, a subreaper (:mod:`.jobtree`), and its end frees the slot.

Runtime podman: a container outlives a killed job script, so while the pool's runtime is podman the
backend removes a pod's containers on cancel and, at start, those whose job script is gone
(:mod:`interlink_nats.submitters.backends.podman_janitor`).

Files the backend adds to the job directory (next to the layout.py contract): ``.shell.claim/`` (the run-once claim),
``.shell.pid`` (runner pid), ``.shell.exit`` (job.sh's exit code), ``job.out`` (job.sh's own stdout/stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.pod_limits import max_grace_s
from interlink_nats.kernel.tasks import cancel_and_wait
from interlink_nats.submitters.backends.accounts import take_over, warn_about_root
from interlink_nats.submitters.backends.podman_janitor import PodmanJanitor
from interlink_nats.submitters.backends.shell.arrays import ShellArrays
from interlink_nats.submitters.backends.shell.config import ShellCommands, ShellConfig, pool_slots, shell_commands
from interlink_nats.submitters.backends.shell.gang import ShellGangs, member_alive, pods_of
from interlink_nats.submitters.backends.shell.host import host_capacity, host_free
from interlink_nats.submitters.backends.shell.processes import (
    CLAIM,
    EXIT_FILE,
    NEVER_STARTED,
    NEVER_STARTED_AFTER,
    PID_FILE,
    Launcher,
    RunningJob,
    is_our_runner,
    may_still_start,
    mtime,
    pidfd_exited,
    proc_start_ticks,
    read_int,
    read_int_and_mtime,
    start_ticks,
)
from interlink_nats.submitters.backends.shell.stopping import Stopping
from interlink_nats.submitters.backends.storage_access import check_own_access
from interlink_nats.submitters.core.backend import (
    GONE,
    BackendContext,
    BackendState,
    BackendUnavailable,
    Capacity,
    JobHandle,
    JobSpec,
    Observation,
    Reconciled,
)
from interlink_nats.submitters.core.site_policy import AccountingPolicy

log = logging.getLogger(__name__)

LAUNCH_ATTEMPTS = 3  # tries per job when the launcher itself fails (a retry of a started job is a no-op)
REAP_FALLBACK_S = 0.5  # how often full slots are re-checked when no pidfd told us a runner ended


class ShellBackend(ShellGangs, ShellArrays):
    """Local processes, at most ``max_concurrent`` at once (others wait in a FIFO); a pod group is one job."""

    name = "shell"
    makes_layout = True  # ``MakesLayout``: each runner makes its job's layout and removes it (:mod:`.jobtree`)

    @classmethod
    def create(cls, config: ShellConfig, context: BackendContext) -> ShellBackend:
        """What the submitter builds (``backends.BACKENDS``); the kill grace is the submitter-wide setting."""
        return cls(
            max_concurrent=config.max_concurrent_jobs,
            bash=config.bash,
            kill_grace_s=context.kill_grace_s,
            clock=context.clock,
            accounting=warn_about_root(config.accounting),  # said once, as the submitter builds its backend
            job_environment=config.job_environment,
        )

    def __init__(
        self,
        *,
        max_concurrent: int = 0,
        bash: str = "bash",
        kill_grace_s: float = 5.0,
        clock: Clock | None = None,
        accounting: AccountingPolicy | None = None,
        job_environment: Sequence[str] | None = None,
    ) -> None:
        self._clock = clock or SYSTEM_CLOCK
        self._fixed_limit = max_concurrent
        self._limit = max_concurrent or (len(os.sched_getaffinity(0)) or 1)
        self._bash = bash
        self._stopping = Stopping(kill_grace_s)
        """Deleted jobs whose process tree is not gone yet (their slots stay taken)."""
        self._accounting = accounting
        self._accounts: dict[str, str] = {}
        """Jobs that run as another account: "uid:gid", until launched."""
        self._queue: deque[JobSpec] = deque()
        self._queued: set[str] = set()
        self._running: dict[str, RunningJob] = {}
        self._cancelled: set[str] = set()  # answered CANCELLED (not GONE) until a poll brings their removal
        self._starting: set[str] = set()
        """Taken from the queue, launcher not done yet: neither queued nor findable on disk."""
        self._unstarted: dict[str, float] = {}
        """Claims with no runner, by when a poll first saw them (see ``NEVER_STARTED_AFTER``)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._launcher = Launcher(bash, job_environment)
        self._launches: set[asyncio.Task[None]] = set()
        self._exit_fds: set[int] = set()
        self._waiting_obs: Observation | None = None
        self._janitor: PodmanJanitor | None = None
        """Set while the pool's runtime is podman: containers can outlive a killed job script."""
        self._tracked: dict[str, JobHandle] = {}
        self._loud: set[str] = set()
        """``poll_changes``: the tracked jobs, and those it observes at its next call (all but the quiet ones:
        runners a pidfd watches, answered with ``seen``; their pidfd, or a cancel, makes them loud again)."""
        self.calls = 0

    def configure(self, build_config: pb.BuildConfig) -> None:
        if not self._fixed_limit:
            self._limit = pool_slots(build_config)
            self._wake.set()
        limits = build_config.limits or pb.PodLimits()
        self._stopping.max_grace_s = max_grace_s(limits.max_termination_grace_seconds)
        podman = build_config.runtime == pb.ContainerRuntime.PODMAN
        self._janitor = PodmanJanitor(build_config.executable or "podman") if podman else None

    def commands(self) -> ShellCommands:
        return shell_commands(self._bash, self._accounting, self._janitor.executable if self._janitor else None)

    async def start(self) -> None:
        if self._janitor is not None:  # after a crash or reboot: containers whose job script is gone
            await self._janitor.sweep(self._job_alive)
        if self._task is None:
            self._task = asyncio.create_task(self._launch_loop(), name="shell-launcher")

    def _job_alive(self, job_dir: Path) -> bool | None:
        """Whether the job in ``job_dir`` still runs; None when the directory is not a job of this backend."""
        if not job_dir.is_dir():
            return False  # removed: cancelled or cleaned up
        if not (job_dir / CLAIM).exists():
            return member_alive(job_dir, self._job_alive)  # a pod-group member runs inside its gang's job
        if (job_dir / EXIT_FILE).exists():
            return False
        pid = read_int(job_dir / PID_FILE)
        if pid is None:
            return False  # the runner writes its pid before it starts job.sh: no script ever ran here
        seen = proc_start_ticks(pid)
        return is_our_runner(pid, job_dir) and seen is not None and seen[1] != "Z"

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._launches:  # answers in flight: each runner it started is recorded before we go
            await asyncio.wait(set(self._launches), timeout=5)
        await self._stopping.close()  # deleted jobs: nothing of theirs outlives us (each ends by its deadline)
        loop = asyncio.get_running_loop()
        for fd in self._exit_fds:  # runners go on without us; stop watching them
            loop.remove_reader(fd)
            os.close(fd)
        self._exit_fds.clear()
        for run in self._running.values():  # their pidfds are closed: never asked again
            run.pidfd = None
        await self._launcher.close()

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / layout.JOB_STDOUT

    async def submit(self, spec: JobSpec) -> str:
        if spec.uid not in self._queued and spec.uid not in self._running and spec.uid not in self._starting:
            policy = self._accounting  # a refusal raises before anything is queued; NSS lookups may block
            if policy is not None and (ident := await asyncio.to_thread(take_over, policy, spec)):
                self._accounts[spec.uid] = str(ident)
            elif policy is None and spec.storage:
                await asyncio.to_thread(check_own_access, spec.storage)
            self._enqueue(spec)
        return spec.uid

    def _enqueue(self, spec: JobSpec) -> None:
        """Queue a new job, as the submitter's account (a gang's launcher switches each member itself)."""
        self._queue.append(spec)
        self._queued.add(spec.uid)
        self._wake.set()

    async def _launch_loop(self) -> None:
        """Start queued jobs while slots are free; launches overlap (each is a pipe round trip)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                if len(self._running) + len(self._starting) >= self._limit:
                    self._reap()
                    if len(self._running) + len(self._starting) >= self._limit:
                        # Woken when a runner exits (pidfd) or a launch ends; a runner without a pidfd: the timeout
                        self._wake.clear()
                        if all(run.watched for run in self._running.values()):
                            await self._wake.wait()
                            continue
                        with contextlib.suppress(TimeoutError):
                            # not wait_for: on 3.11 it can swallow a cancel
                            async with asyncio.timeout(REAP_FALLBACK_S):
                                await self._wake.wait()
                        continue
                spec = self._queue.popleft()
                if spec.uid in self._cancelled:
                    self._queued.discard(spec.uid)
                    continue
                self._starting.add(spec.uid)
                self._queued.discard(spec.uid)
                task = asyncio.create_task(self._launch(spec), name=f"shell-launch-{spec.uid}")
                self._launches.add(task)
                task.add_done_callback(self._launches.discard)

    async def _launch(self, spec: JobSpec) -> None:
        try:
            for attempt in range(1, LAUNCH_ATTEMPTS + 1):
                self.calls += 1
                try:
                    pid = await self._launcher.launch(spec, self._accounts.get(spec.uid, ""))
                except BackendUnavailable as exc:
                    if attempt == LAUNCH_ATTEMPTS:
                        log.error("launching job %s failed: %s; it will be reported as lost", spec.uid, exc)
                        return
                    log.warning("launching job %s failed (%s); retrying", spec.uid, exc)
                    await self._clock.sleep(0.1 * attempt)
                    continue
                if pid is None:
                    return  # claimed before (a retry after a crash): the poll finds its runner by the pid file
                run = RunningJob(pid, None, spec.job_dir)
                self._running[spec.uid] = run
                if not self._watch_exit(spec.uid, run):  # no pidfd: its start time tells it from a later pid
                    seen = proc_start_ticks(pid)
                    if seen is None:
                        del self._running[spec.uid]  # gone already: the poll finds its exit file
                    else:
                        run.start_ticks = seen[0]
                return
        except Exception:
            log.exception("launching job %s failed; it will be reported as lost", spec.uid)
        finally:
            self._starting.discard(spec.uid)
            self._accounts.pop(spec.uid, None)
            self._wake.set()

    def _watch_exit(self, uid: str, run: RunningJob) -> bool:
        """Learn the moment the runner exits: a pidfd becomes readable then (Linux ≥ 5.3). False: no pidfd.

        Frees its slot at once, and lets a poll skip every job whose runner has not exited (no /proc or file
        reads for it). Without a pidfd (old kernel, out of descriptors) the poll checks the job, ``_reap()`` its slot.
        """
        pid = run.pid
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return False
        loop = asyncio.get_running_loop()
        self._exit_fds.add(fd)
        run.watched, run.pidfd = True, fd

        def exited() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._exit_fds.discard(fd)
            run.pidfd = None
            current = self._running.get(uid)
            if current is not None and current.pid == pid:
                del self._running[uid]
            self._loud.add(uid)  # its answer may change now (``poll_changes``)
            self._wake.set()

        loop.add_reader(fd, exited)
        return True

    def _alive(self, run: RunningJob) -> bool:
        if run.pidfd is not None:
            return not pidfd_exited(run.pidfd)  # readable once it has exited (a zombie too)
        seen = proc_start_ticks(run.pid)
        return seen is not None and seen[0] == run.start_ticks and seen[1] != "Z"

    def _reap(self) -> None:
        """Free the slots of runners that ended and that no pidfd watches (adopted ones, or no pidfd support).

        Why not all: the launch loop reaps on every wake-up while the slots are full, i.e. on every
        Submit under load; a watched runner's slot is freed by its pidfd the moment it exits, so
        checking its files and ``/proc`` here again only cost CPU per create.
        """
        for uid, run in list(self._running.items()):
            if run.watched:
                continue
            if (run.job_dir / EXIT_FILE).exists() or not self._alive(run):
                del self._running[uid]

    def _adopt(self, uid: str, job_dir: Path) -> RunningJob | None:
        pid = read_int(job_dir / PID_FILE)
        if pid is None or not is_our_runner(pid, job_dir):
            return None
        seen = proc_start_ticks(pid)
        if seen is None or seen[1] == "Z":
            return None
        run = RunningJob(pid, seen[0], job_dir)
        self._running[uid] = run
        self._watch_exit(uid, run)
        return run

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]:
        out: dict[str, Reconciled] = {}
        for job in jobs:
            if (job.job_dir / CLAIM).exists():
                out[job.uid] = Reconciled(job.uid)
                if not (job.job_dir / EXIT_FILE).exists():
                    self._adopt(job.uid, job.job_dir)
            elif job.uid in self._queued or job.uid in self._starting:
                out[job.uid] = Reconciled(job.uid)
            else:
                out[job.uid] = Reconciled(None)
        return out

    async def poll(self, jobs: Sequence[JobHandle]) -> dict[str, Observation]:
        """One pass over the tracked jobs' files and /proc; no subprocess at all.

        Only jobs that may have changed cost I/O: a runner watched by a pidfd that has not fired is
        still running (the same Observation object as last time, which the poller skips), and a
        job still in our queue is waiting.
        """
        out: dict[str, Observation] = {}
        now = self._clock.time()
        running = self._running
        queued = self._queued
        waiting = None
        for job in jobs:
            uid = job.uid
            run = running.get(uid)
            if run is not None and run.seen is not None:
                out[uid] = run.seen
                continue
            if uid in queued:
                out[uid] = waiting = waiting or self._waiting()
                continue
            obs = self._observe(job, now)
            if obs is not None:
                out[uid] = obs
        return out

    async def poll_changes(
        self, added: Sequence[JobHandle], removed: Sequence[JobHandle], *, restart: bool
    ) -> dict[str, Observation]:
        """``ReportsChanges``: :meth:`poll` of the loud jobs only, so 10,000 running jobs cost what changed.

        A job whose runner a pidfd watches is answered ``seen`` and then left out until that pidfd fires
        (or a cancel): nothing about it can change before. Every other job is observed at every call, as
        :meth:`poll` does; a loud job it finds gone is answered GONE (a job left out keeps its last answer).
        """
        if restart:
            self._tracked, self._loud = {}, set()
            self._cancelled.intersection_update(job.uid for job in added)  # a restart brings no removals
        tracked, loud = self._tracked, self._loud
        for job in removed:
            self._cancelled.discard(job.uid)  # the submitter untracks before it cancels: never polled again
            if tracked.get(job.uid) == job:
                del tracked[job.uid]
                loud.discard(job.uid)
        for job in added:
            tracked[job.uid] = job
            loud.add(job.uid)
        jobs = []
        for uid in list(loud):
            found = tracked.get(uid)
            if found is None:
                loud.discard(uid)  # a pidfd or a cancel named a job no longer tracked
            else:
                jobs.append(found)
        out = await self.poll(jobs)
        running = self._running
        for job in jobs:
            uid = job.uid
            obs = out.get(uid)
            if obs is None:
                out[uid] = GONE
                continue
            run = running.get(uid)
            if run is not None and run.seen is obs:
                loud.discard(uid)
        return out

    def _waiting(self) -> Observation:
        """The QUEUED observation, one object while the limit stays (so unchanged jobs compare by identity)."""
        reason = f"waiting for one of {self._limit} slots"
        if self._waiting_obs is None or self._waiting_obs.reason != reason:
            self._waiting_obs = Observation(BackendState.QUEUED, reason=reason)
        return self._waiting_obs

    def _observe(self, job: JobHandle, now: float) -> Observation | None:
        uid, job_dir = job.uid, job.job_dir
        exited = read_int_and_mtime(os.path.join(job_dir, EXIT_FILE))
        if exited is not None:
            code, finished = exited
            self._running.pop(uid, None)
            self._unstarted.pop(uid, None)
            started = mtime(os.path.join(job_dir, PID_FILE))
            if uid in self._cancelled:  # its runner outlived the cancel's TERM and wrote the script's code
                return Observation(BackendState.CANCELLED, raw_state="killed on request", finished_at=finished)
            if code == 0:
                return Observation(BackendState.COMPLETED, 0, started_at=started, finished_at=finished)
            sig = code - 128 if 128 < code < 160 else None
            return Observation(BackendState.FAILED, code, sig, started_at=started, finished_at=finished)
        if uid in self._queued:
            return self._waiting()
        if uid in self._starting:
            return Observation(BackendState.RUNNING, reason="starting")
        run = self._running.get(uid)
        if run is not None:
            if self._alive(run):
                return self._seen_running(run)
            del self._running[uid]
            self._wake.set()
        elif (run := self._adopt(uid, job_dir)) is not None:
            self._unstarted.pop(uid, None)
            return self._seen_running(run)
        if uid in self._cancelled:
            return Observation(BackendState.CANCELLED, raw_state="killed on request")
        if (job_dir / CLAIM).exists() and not (job_dir / PID_FILE).exists():
            if may_still_start(job_dir):
                self._unstarted.pop(uid, None)
                return Observation(BackendState.RUNNING, reason="starting")
            first_seen = self._unstarted.setdefault(uid, now)
            if now - first_seen < NEVER_STARTED_AFTER:
                return Observation(BackendState.RUNNING, reason="starting")
            del self._unstarted[uid]
            return Observation(BackendState.GONE, reason=NEVER_STARTED)
        return None  # gone: the runner vanished without writing its exit file

    def _seen_running(self, run: RunningJob) -> Observation:
        obs = Observation(BackendState.RUNNING, started_at=mtime(run.job_dir / PID_FILE))
        if run.watched and obs.started_at is not None:
            run.seen = obs  # nothing more to learn until its pidfd fires (which drops ``run``)
        return obs

    async def cancel(self, job: JobHandle) -> None:
        uid = job.uid
        if uid not in self._queued and (job.job_dir / EXIT_FILE).exists():  # over already: its outcome stands
            await self._remove_containers(job)
            return
        self._cancelled.add(uid)
        self._loud.add(uid)
        self._unstarted.pop(uid, None)
        if uid in self._queued:
            self._queued.discard(uid)
            self._accounts.pop(uid, None)
            self._queue = deque(s for s in self._queue if s.uid != uid)
        with contextlib.suppress(OSError):
            (job.job_dir / CLAIM).mkdir()  # a launch not yet at its mkdir now loses the claim
        for _ in range(200):  # a launch past its mkdir: wait until its runner is known
            if uid not in self._starting:
                break
            await asyncio.sleep(0.02)
        run = self._running.get(uid) or self._adopt(uid, job.job_dir)
        ticks = start_ticks(run) if run is not None and self._alive(run) else None
        if run is not None and ticks is not None:  # its slot is freed when its runner ends: once nothing of it is left
            await self._stopping.start(run.pid, ticks, lambda: self._remove_containers(job))
        else:
            await self._remove_containers(job)

    async def _remove_containers(self, job: JobHandle) -> None:
        if self._janitor is not None:  # a script killed after the grace period leaves its containers running
            for pod in pods_of(job):  # (a gang's: every member's)
                await self._janitor.remove_pod(pod)

    async def capacity(self) -> Capacity:
        return await host_capacity()

    async def free(self) -> Capacity | None:
        """What this host has free now (``ReportsFree``), less the slots its own jobs hold."""
        return host_free(busy=len(self._running) + len(self._starting) + len(self._queue), slots=self._limit)
