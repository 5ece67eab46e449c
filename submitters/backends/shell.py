"""The ``shell`` backend: each job is ``bash job.sh`` on this host, detached from the submitter.

Why detached: a submitter restart (or crash) must not kill running pods. One long-lived
launcher (a small bash in its own session, started once) reads job directories on its stdin;
for each it claims the directory and starts the runner in the background, in a process group
of its own, then answers with the runner's pid. The runner keeps going when the submitter (and
then the launcher, at end of input) goes away. The job is found again by its pid file, checked
against ``/proc/<pid>/cmdline`` (and its start time once seen), so a recycled pid is never
mistaken for the job.

Why one launcher instead of a process per job: forking the submitter (a large Python process)
for every job cost about a quarter of its event loop under load (fork/exec, a child-watcher
thread, pipe transports). Now a launch is one line written to a pipe and one read back, and the
fork happens in a small bash.

Why "run at most once" holds: each launch starts with ``mkdir .shell.claim``, atomic on every
POSIX filesystem; a second launch of the same directory (a retry after a crash, or a second
launcher) loses the race and starts nothing. The claim and the start of the runner happen in
the launcher, which finishes every directory it was sent even if the submitter is killed. Only a
launcher killed between the two (its container restarted) leaves a claim without a runner; the
poll reports that job lost, saying it never started, on its second sighting (``NEVER_STARTED_AFTER``).

Runtime podman: a container outlives a killed job script, so while the pool's runtime is podman the
backend removes a pod's containers on cancel and, at start, those whose job script is gone
(:mod:`interlink_nats.submitters.containers`).

Files the backend adds to the job directory (next to the layout.py contract):
``.shell.claim/`` (the run-once claim), ``.shell.pid`` (runner pid), ``.shell.exit``
(job.sh's exit code), ``job.out`` (job.sh's own stdout/stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.submitters.backends.base import (
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
from interlink_nats.submitters.backends.proc import run_command
from interlink_nats.submitters.containers import PodmanJanitor
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

CLAIM = ".shell.claim"
PID_FILE = ".shell.pid"
EXIT_FILE = ".shell.exit"
RUNNER_NAME = "interlink-shell-job"
LAUNCHER_NAME = "interlink-shell-launch"
CLAIM_LAUNCHER = f"{CLAIM}/launcher"
"""Inside the claim: pid of the launcher that made it (written before the runner is forked)."""
CLAIM_RUNNER = f"{CLAIM}/runner"
"""Inside the claim: pid of the runner it forked (written right after the fork)."""
NEVER_STARTED_AFTER = 1.0
"""A claim without a runner whose launcher is gone (and whose forked runner, if any, is gone too), seen
on two polls at least this far apart, was never started: the launcher was killed between claim and start
(e.g. its container restarted). While the launcher lives it may still be working through its backlog."""
NEVER_STARTED = "the job never started: it was claimed, but the launcher stopped before starting its runner"

# Constant programs, never formatted: the only inputs are positional arguments and stdin.
# The launcher reads NUL-terminated job directories and answers "<dir>\0<pid>\0" (or "claimed").
# ``set -m`` gives every runner a process group of its own (cancel signals that group only);
# ``disown`` keeps bash's job table from growing with every job.
_LAUNCHER = r"""
set -m
bash=$1 runner=$2 env_name=$3
while IFS= read -r -d '' dir; do
  if mkdir "$dir/.shell.claim" 2>/dev/null; then
    echo $$ > "$dir/.shell.claim/launcher"
    ( export "$env_name=$dir"; exec "$bash" -c "$runner" interlink-shell-job "$dir" "$bash" ) \
      </dev/null >/dev/null 2>&1 &
    echo $! > "$dir/.shell.claim/runner"
    printf '%s\0%s\0' "$dir" "$!"
    disown
  else
    printf '%s\0claimed\0' "$dir"
  fi
done
"""
_RUNNER = r"""
cd "$1" || exit 97
echo $$ > .shell.pid.tmp && mv -f .shell.pid.tmp .shell.pid
"$2" ./job.sh >> job.out 2>&1 </dev/null
rc=$?
echo $rc > .shell.exit.tmp && mv -f .shell.exit.tmp .shell.exit
exit $rc
"""


def _proc_start_ticks(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of a process, or None if gone.

    Read with plain ``os`` calls (half the CPU of ``Path.read_bytes``): it runs once per launch.
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def _is_our_runner(pid: int, job_dir: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return RUNNER_NAME.encode() in argv and str(job_dir).encode() in argv


def _is_ours(pid: int | None) -> bool:
    """A live launcher, or a runner (before its exec it still has the launcher's command line)."""
    if pid is None:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    seen = _proc_start_ticks(pid)
    alive = seen is not None and seen[1] != "Z"
    return alive and (LAUNCHER_NAME.encode() in argv or RUNNER_NAME.encode() in argv)


def _may_still_start(job_dir: Path) -> bool:
    """A claim without a pid file whose launcher or forked runner is still alive: it is starting."""
    return _is_ours(_read_int(job_dir / CLAIM_LAUNCHER)) or _is_ours(_read_int(job_dir / CLAIM_RUNNER))


def _read_int_and_mtime(path: Path | str) -> tuple[int, float] | None:
    """The number a small file (pid, exit code) holds, and its mtime, with plain ``os`` calls: a poll reads
    the exit file of every job whose runner ended (``Path.read_text`` and a ``stat`` cost twice the syscalls)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 64)
        mtime = os.fstat(fd).st_mtime
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return int(raw.split()[0]), mtime
    except (ValueError, IndexError):
        return None


def _read_int(path: Path | str) -> int | None:
    got = _read_int_and_mtime(path)
    return None if got is None else got[0]


def _mtime(path: Path | str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _mem_total() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


class _Launcher:
    """The long-lived launcher process and the launches waiting for its answer."""

    def __init__(self, bash: str) -> None:
        self._bash = bash
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[bytes, deque[asyncio.Future[int | None]]] = {}
        self._lock = asyncio.Lock()
        self.spawned = 0
        """Launcher processes started so far (one, unless one died)."""

    async def _ensure(self) -> asyncio.subprocess.Process:
        async with self._lock:
            proc = self._proc
            if proc is not None and proc.returncode is None and self._reader is not None and not self._reader.done():
                return proc
            try:
                proc = await asyncio.create_subprocess_exec(
                    self._bash,
                    "-c",
                    _LAUNCHER,
                    LAUNCHER_NAME,
                    self._bash,
                    _RUNNER,
                    layout.JOB_DIR_ENV,
                    cwd="/",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise BackendUnavailable(f"cannot start {self._bash}: {exc}") from exc
            self.spawned += 1
            self._proc = proc
            self._reader = asyncio.create_task(self._read(proc), name="shell-launcher-read")
            return proc

    async def launch(self, job_dir: Path) -> int | None:
        """Claim ``job_dir`` and start its runner: the runner's pid, or None if the directory was claimed before."""
        proc = await self._ensure()
        key = str(job_dir).encode()
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(fut)
        assert proc.stdin is not None
        try:
            proc.stdin.write(key + b"\0")
            await proc.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._forget(key, fut)
            raise BackendUnavailable(f"the shell launcher is gone: {exc}") from exc
        return await fut

    def _forget(self, key: bytes, fut: asyncio.Future[int | None]) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None and fut in waiting:
            waiting.remove(fut)
            if not waiting:
                del self._waiting[key]

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        error: Exception = BackendUnavailable("the shell launcher exited")
        try:
            while True:
                key = (await proc.stdout.readuntil(b"\0"))[:-1]
                answer = (await proc.stdout.readuntil(b"\0"))[:-1]
                waiting = self._waiting.get(key)
                if not waiting:
                    log.warning("shell launcher answered for a job nobody waits for: %r", key)
                    continue
                fut = waiting.popleft()
                if not waiting:
                    del self._waiting[key]
                if not fut.done():
                    fut.set_result(int(answer) if answer.isdigit() else None)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError) as exc:
            error = BackendUnavailable(f"the shell launcher exited ({type(exc).__name__})")
        finally:
            # Whatever it had not answered may or may not have started: the caller retries, and the
            # claim makes a retry of a started job a no-op ("claimed"); the pid file finds its runner.
            unanswered, self._waiting = self._waiting, {}
            for futs in unanswered.values():
                for fut in futs:
                    if not fut.done():
                        fut.set_exception(error)
            with contextlib.suppress(ProcessLookupError):
                if proc.returncode is None:
                    proc.kill()

    async def close(self) -> None:
        """End the launcher's input: it finishes what it was sent and exits; runners are not touched."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(5):  # not wait_for: on 3.11 it can swallow a cancel
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None


LAUNCH_ATTEMPTS = 3
"""Tries per job when the launcher itself fails (a retry of a started job is a no-op)."""


REAP_FALLBACK_S = 0.5
"""How often full slots are re-checked when no pidfd told us a runner ended."""


@dataclass(slots=True)
class _Running:
    pid: int
    start_ticks: int
    job_dir: Path
    watched: bool = False
    """A pidfd tells when it ends: until then nothing about the job can change but its container files.
    ``_reap`` need not look at it either: its slot is freed by the pidfd."""
    seen: Observation | None = None
    """The RUNNING observation a poll returns, without any I/O, while ``watched``."""


class ShellConfig(BaseModel):
    """The ``shell`` settings section (``INTERLINK_SUBMITTER_SHELL__*``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent_jobs: int = Field(0, ge=0)
    """Jobs running at once; 0 means the BuildConfig's value, else the number of CPUs."""
    bash: str = "bash"


class ShellBackend:
    """Local processes, at most ``max_concurrent`` at once (others wait in a FIFO)."""

    name = "shell"

    @classmethod
    def create(cls, config: ShellConfig, context: BackendContext) -> ShellBackend:
        """What the submitter builds (``backends.BACKENDS``); the kill grace is the submitter-wide setting."""
        return cls(
            max_concurrent=config.max_concurrent_jobs,
            bash=config.bash,
            kill_grace_s=context.kill_grace_s,
            clock=context.clock,
        )

    def __init__(
        self, *, max_concurrent: int = 0, bash: str = "bash", kill_grace_s: float = 5.0, clock: Clock | None = None
    ) -> None:
        self._clock = clock or SYSTEM_CLOCK
        self._fixed_limit = max_concurrent
        self._limit = max_concurrent or (len(os.sched_getaffinity(0)) or 1)
        self._bash = bash
        self._kill_grace_s = kill_grace_s
        self._queue: deque[JobSpec] = deque()
        self._queued: set[str] = set()
        self._running: dict[str, _Running] = {}
        self._cancelled: set[str] = set()
        self._starting: set[str] = set()
        """Taken from the queue, launcher not done yet: neither queued nor findable on disk."""
        self._unstarted: dict[str, float] = {}
        """Claims with no runner, by when a poll first saw them (see ``NEVER_STARTED_AFTER``)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._launcher = _Launcher(bash)
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

    @property
    def limit(self) -> int:
        return self._limit

    def configure(self, build_config: pb.BuildConfig) -> None:
        if not self._fixed_limit:
            wanted = build_config.shell.max_concurrent_jobs if build_config.shell else 0
            self._limit = wanted or (len(os.sched_getaffinity(0)) or 1)
            self._wake.set()
        if build_config.runtime == pb.ContainerRuntime.PODMAN:
            self._janitor = PodmanJanitor(build_config.executable or "podman")
        else:
            self._janitor = None

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
            return None
        if (job_dir / EXIT_FILE).exists():
            return False
        pid = _read_int(job_dir / PID_FILE)
        if pid is None:
            return False  # the runner writes its pid before it starts job.sh: no script ever ran here
        seen = _proc_start_ticks(pid)
        return _is_our_runner(pid, job_dir) and seen is not None and seen[1] != "Z"

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._launches:  # answers in flight: each runner it started is recorded before we go
            await asyncio.wait(set(self._launches), timeout=5)
        loop = asyncio.get_running_loop()
        for fd in self._exit_fds:  # runners go on without us; stop watching them
            loop.remove_reader(fd)
            os.close(fd)
        self._exit_fds.clear()
        await self._launcher.close()

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / layout.JOB_STDOUT

    async def submit(self, spec: JobSpec) -> str:
        if spec.uid not in self._queued and spec.uid not in self._running and spec.uid not in self._starting:
            self._queue.append(spec)
            self._queued.add(spec.uid)
            self._wake.set()
        return spec.uid

    async def _launch_loop(self) -> None:
        """Start queued jobs while slots are free; launches overlap (each is a pipe round trip)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                if len(self._running) + len(self._starting) >= self._limit:
                    self._reap()
                    if len(self._running) + len(self._starting) >= self._limit:
                        # Woken as soon as a runner exits (pidfd); the timeout is the fallback where
                        # pidfds are unavailable, and for runners adopted after a restart.
                        self._wake.clear()
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
                    pid = await self._launcher.launch(spec.job_dir)
                except BackendUnavailable as exc:
                    if attempt == LAUNCH_ATTEMPTS:
                        log.error("launching job %s failed: %s; it will be reported as lost", spec.uid, exc)
                        return
                    log.warning("launching job %s failed (%s); retrying", spec.uid, exc)
                    await asyncio.sleep(0.1 * attempt)
                    continue
                if pid is None:
                    return  # claimed before (a retry after a crash): the poll finds its runner by the pid file
                seen = _proc_start_ticks(pid)
                if seen is not None:
                    self._running[spec.uid] = _Running(pid, seen[0], spec.job_dir)
                    self._watch_exit(spec.uid, pid)
                return
        except Exception:
            log.exception("launching job %s failed; it will be reported as lost", spec.uid)
        finally:
            self._starting.discard(spec.uid)
            self._wake.set()

    def _watch_exit(self, uid: str, pid: int) -> None:
        """Learn the moment the runner exits: a pidfd becomes readable then (Linux ≥ 5.3).

        Frees its slot at once, and lets a poll skip every job whose runner has not exited (no
        /proc or file reads for it). Without a pidfd (old kernel, or out of descriptors) the poll
        checks the job as before, and ``_reap()`` frees its slot on the fallback tick.
        """
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return
        loop = asyncio.get_running_loop()
        self._exit_fds.add(fd)
        watched = self._running.get(uid)
        if watched is not None and watched.pid == pid:
            watched.watched = True

        def exited() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._exit_fds.discard(fd)
            current = self._running.get(uid)
            if current is not None and current.pid == pid:
                del self._running[uid]
            self._loud.add(uid)  # its answer may change now (``poll_changes``)
            self._wake.set()

        loop.add_reader(fd, exited)

    def _alive(self, run: _Running) -> bool:
        seen = _proc_start_ticks(run.pid)
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

    def _adopt(self, uid: str, job_dir: Path) -> _Running | None:
        pid = _read_int(job_dir / PID_FILE)
        if pid is None or not _is_our_runner(pid, job_dir):
            return None
        seen = _proc_start_ticks(pid)
        if seen is None or seen[1] == "Z":
            return None
        run = _Running(pid, seen[0], job_dir)
        self._running[uid] = run
        self._watch_exit(uid, pid)
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
        tracked, loud = self._tracked, self._loud
        for job in removed:
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
        exited = _read_int_and_mtime(os.path.join(job_dir, EXIT_FILE))
        if exited is not None:
            code, finished = exited
            self._running.pop(uid, None)
            self._unstarted.pop(uid, None)
            started = _mtime(os.path.join(job_dir, PID_FILE))
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
            if _may_still_start(job_dir):
                self._unstarted.pop(uid, None)
                return Observation(BackendState.RUNNING, reason="starting")
            first_seen = self._unstarted.setdefault(uid, now)
            if now - first_seen < NEVER_STARTED_AFTER:
                return Observation(BackendState.RUNNING, reason="starting")
            del self._unstarted[uid]
            return Observation(BackendState.GONE, reason=NEVER_STARTED)
        return None  # gone: the runner vanished without writing its exit file

    def _seen_running(self, run: _Running) -> Observation:
        obs = Observation(BackendState.RUNNING, started_at=_mtime(run.job_dir / PID_FILE))
        if run.watched and obs.started_at is not None:
            run.seen = obs  # nothing more to learn until its pidfd fires (which drops ``run``)
        return obs

    async def cancel(self, job: JobHandle) -> None:
        uid = job.uid
        self._cancelled.add(uid)
        self._loud.add(uid)
        self._unstarted.pop(uid, None)
        if uid in self._queued:
            self._queued.discard(uid)
            self._queue = deque(s for s in self._queue if s.uid != uid)
        with contextlib.suppress(OSError):
            (job.job_dir / CLAIM).mkdir()  # a launch not yet at its mkdir now loses the claim
        for _ in range(200):  # a launch past its mkdir: wait until its runner is known
            if uid not in self._starting:
                break
            await asyncio.sleep(0.02)
        run = self._running.get(uid) or self._adopt(uid, job.job_dir)
        if run is not None:
            await self._terminate(run)
            self._running.pop(uid, None)
            self._wake.set()
        if self._janitor is not None:  # a script killed after the grace period leaves its containers running
            await self._janitor.remove_pod(uid)

    async def _terminate(self, run: _Running) -> None:
        try:
            pgid = os.getpgid(run.pid)
        except ProcessLookupError:
            return
        for sig, wait in ((signal.SIGTERM, self._kill_grace_s), (signal.SIGKILL, 5.0)):
            if not self._alive(run):
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            for _ in range(max(1, int(wait / 0.05))):
                if not self._alive(run):
                    return
                await asyncio.sleep(0.05)

    async def capacity(self) -> Capacity:
        cpus = len(os.sched_getaffinity(0)) or (os.cpu_count() or 1)
        mem = _mem_total()
        gpus = 0
        with contextlib.suppress(Exception):
            done = await run_command(["nvidia-smi", "-L"], time_limit=10)
            gpus = sum(1 for ln in done.stdout.splitlines() if ln.startswith("GPU "))
        return Capacity(cpu_millis=cpus * 1000, memory_bytes=mem, gpus=gpus, nodes=1)
