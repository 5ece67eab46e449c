"""The ``shell`` backend: each job is ``bash job.sh`` on this host, detached from the submitter.

Why detached: a submitter restart (or crash) must not kill running pods. A short launcher
(``create_subprocess_exec``, own session) claims the job directory and starts the runner
in the background, then exits; the runner keeps going under init. The job is found again
by its pid file, checked against ``/proc/<pid>/cmdline`` (and its start time once seen), so
a recycled pid is never mistaken for the job.

Why "run at most once" holds: the launcher starts with ``mkdir .shell.claim``, atomic on
every POSIX filesystem; a second launch of the same directory (a retry after a crash)
loses the race and exits without running anything.

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
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import layout
from interlink_nats.submitters.backends.base import (
    BackendState,
    BackendUnavailable,
    Capacity,
    JobHandle,
    JobSpec,
    Observation,
    Reconciled,
)
from interlink_nats.submitters.backends.proc import environ_with, run_command

log = logging.getLogger(__name__)

CLAIM = ".shell.claim"
PID_FILE = ".shell.pid"
EXIT_FILE = ".shell.exit"
RUNNER_NAME = "interlink-shell-job"
STARTING_GRACE = 60.0
"""A claim older than this without a pid file means the runner never started (e.g. a reboot)."""

# Constant programs, never formatted: the only inputs are positional arguments.
_LAUNCHER = r"""
dir=$1
mkdir "$dir/.shell.claim" 2>/dev/null || { echo claimed; exit 0; }
cd "$dir" || exit 97
"$2" -c "$3" interlink-shell-job "$dir" "$2" </dev/null >/dev/null 2>&1 &
echo "$!"
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
    """(start time in clock ticks since boot, state letter) of a process, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
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


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _mem_total() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(slots=True)
class _Running:
    pid: int
    start_ticks: int
    job_dir: Path


class ShellBackend:
    """Local processes, at most ``max_concurrent`` at once (others wait in a FIFO)."""

    name = "shell"

    def __init__(self, *, max_concurrent: int = 0, bash: str = "bash", kill_grace: float = 5.0) -> None:
        self._fixed_limit = max_concurrent
        self._limit = max_concurrent or (len(os.sched_getaffinity(0)) or 1)
        self._bash = bash
        self._kill_grace = kill_grace
        self._queue: deque[JobSpec] = deque()
        self._queued: set[str] = set()
        self._running: dict[str, _Running] = {}
        self._cancelled: set[str] = set()
        self._starting: set[str] = set()
        """Taken from the queue, launcher not done yet: neither queued nor findable on disk."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.calls = 0

    @property
    def limit(self) -> int:
        return self._limit

    def configure(self, build_config: pb.BuildConfig) -> None:
        if not self._fixed_limit:
            wanted = build_config.shell.max_concurrent_jobs if build_config.shell else 0
            self._limit = wanted or (len(os.sched_getaffinity(0)) or 1)
            self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._launch_loop(), name="shell-launcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / layout.JOB_STDOUT

    async def submit(self, spec: JobSpec) -> str:
        if spec.uid not in self._queued and spec.uid not in self._running and spec.uid not in self._starting:
            self._queue.append(spec)
            self._queued.add(spec.uid)
            self._wake.set()
        return spec.uid

    async def _launch_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                if len(self._running) >= self._limit:
                    self._reap()
                    if len(self._running) >= self._limit:
                        await asyncio.sleep(0.05)
                        continue
                spec = self._queue.popleft()
                if spec.uid in self._cancelled:
                    self._queued.discard(spec.uid)
                    continue
                self._starting.add(spec.uid)
                self._queued.discard(spec.uid)
                try:
                    await self._launch(spec)
                except Exception:
                    log.exception("launching job %s failed; it will be reported as lost", spec.uid)
                finally:
                    self._starting.discard(spec.uid)

    async def _launch(self, spec: JobSpec) -> None:
        self.calls += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                self._bash, "-c", _LAUNCHER, "interlink-shell-launch", str(spec.job_dir), self._bash, _RUNNER,
                cwd=str(spec.job_dir), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
                env=environ_with({layout.JOB_DIR_ENV: str(spec.job_dir)}),
            )
        except OSError as exc:
            raise BackendUnavailable(f"cannot start {self._bash}: {exc}") from exc
        out, _ = await proc.communicate()
        text = out.decode().strip()
        if proc.returncode != 0 or not text.isdigit():
            if text != "claimed":
                log.warning("launcher for %s exited %s: %r", spec.uid, proc.returncode, text)
            return
        pid = int(text)
        seen = _proc_start_ticks(pid)
        if seen is not None:
            self._running[spec.uid] = _Running(pid, seen[0], spec.job_dir)

    def _alive(self, run: _Running) -> bool:
        seen = _proc_start_ticks(run.pid)
        return seen is not None and seen[0] == run.start_ticks and seen[1] != "Z"

    def _reap(self) -> None:
        """Free the slots of runners that ended (cheap: only the running ones are checked)."""
        for uid, run in list(self._running.items()):
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
        """One pass over the tracked jobs' files and /proc; no subprocess at all."""
        out: dict[str, Observation] = {}
        now = time.time()
        for job in jobs:
            obs = self._observe(job, now)
            if obs is not None:
                out[job.uid] = obs
        return out

    def _observe(self, job: JobHandle, now: float) -> Observation | None:
        uid, job_dir = job.uid, job.job_dir
        code = _read_int(job_dir / EXIT_FILE)
        if code is not None:
            self._running.pop(uid, None)
            started = _mtime(job_dir / PID_FILE)
            finished = _mtime(job_dir / EXIT_FILE)
            if code == 0:
                return Observation(BackendState.COMPLETED, 0, started_at=started, finished_at=finished)
            sig = code - 128 if 128 < code < 160 else None
            return Observation(BackendState.FAILED, code, sig, started_at=started, finished_at=finished)
        if uid in self._queued:
            return Observation(BackendState.QUEUED, reason=f"waiting for one of {self._limit} slots")
        if uid in self._starting:
            return Observation(BackendState.RUNNING, reason="starting")
        run = self._running.get(uid)
        if run is not None:
            if self._alive(run):
                return Observation(BackendState.RUNNING, started_at=_mtime(job_dir / PID_FILE))
            del self._running[uid]
            self._wake.set()
        elif self._adopt(uid, job_dir) is not None:
            return Observation(BackendState.RUNNING, started_at=_mtime(job_dir / PID_FILE))
        if uid in self._cancelled:
            return Observation(BackendState.CANCELLED, raw_state="killed on request")
        claimed = _mtime(job_dir / CLAIM)
        if claimed is not None and not (job_dir / PID_FILE).exists() and now - claimed < STARTING_GRACE:
            return Observation(BackendState.RUNNING, reason="starting")
        return None  # gone: the runner vanished without writing its exit file

    async def cancel(self, job: JobHandle) -> None:
        uid = job.uid
        self._cancelled.add(uid)
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
        if run is None:
            return
        await self._terminate(run)
        self._running.pop(uid, None)
        self._wake.set()

    async def _terminate(self, run: _Running) -> None:
        try:
            pgid = os.getpgid(run.pid)
        except ProcessLookupError:
            return
        for sig, wait in ((signal.SIGTERM, self._kill_grace), (signal.SIGKILL, 5.0)):
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
