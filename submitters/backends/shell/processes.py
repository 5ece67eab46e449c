"""The shell backend's processes: the one launcher, the runner it forks per job, and how we recognise them.

Apart from :mod:`.shell` (the backend's bookkeeping) because this is the part that talks to the
kernel: ``/proc`` reads, the launcher's pipe, the files a runner leaves in its job directory. The
module docstring of :mod:`.shell` says why a job runs at most once.

Why one launcher instead of a process per job: forking the submitter (a large Python process)
for every job cost about a quarter of its event loop under load (fork/exec, a child-watcher
thread, pipe transports). Now a launch is one line written to a pipe and one read back, and the
fork happens in a small Python (:mod:`.jobtree`, which also makes each runner a subreaper).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import select
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.job_environment import DEFAULT_JOB_ENVIRONMENT, job_environment
from interlink_nats.submitters.backends.proc import timed
from interlink_nats.submitters.backends.shell import jobtree
from interlink_nats.submitters.backends.shell.jobtree import CLAIM as CLAIM
from interlink_nats.submitters.backends.shell.jobtree import CLAIM_LAUNCHER, CLAIM_RUNNER, LAUNCHER_NAME, RUNNER_NAME
from interlink_nats.submitters.core.backend import BackendUnavailable, JobSpec, Observation

log = logging.getLogger(__name__)

PID_FILE = ".shell.pid"
EXIT_FILE = ".shell.exit"
NEVER_STARTED_AFTER = 1.0
"""A claim without a runner whose launcher is gone (and whose forked runner, if any, is gone too), seen
on two polls at least this far apart, was never started: the launcher was killed between claim and start
(e.g. its container restarted). While the launcher lives it may still be working through its backlog."""
NEVER_STARTED = "the job never started: it was claimed, but the launcher stopped before starting its runner"

# A constant program, never formatted: the only inputs are positional arguments. The launcher (:mod:`.jobtree`,
# a small Python, one per submitter) forks it per job in a process group of its own (cancel signals that group),
# made a subreaper (the job's orphans stay below it), with "$1" the job directory, "$3" the account ("uid:gid" or
# empty), "$4" "$5" the Python and jobtree.py that kill what job.sh leaves behind, "$6" set when the launcher
# removes the job's ended layout: once job.sh ended the runner writes its directory to fd 3 and waits (bounded)
# for the launcher to close fd 4 (jobtree's docstring says why; PIPE ignored from then on: a launcher gone
# must not kill the runner before its exit file). Neither descriptor reaches job.sh. With an account the runner
# (still the submitter's user: it writes the pid and exit files) runs job.sh through setpriv as that account,
# without the submitter's groups. It outlives a cancel's TERM (a trap: job.sh gets the default) and ends only
# once nothing of its job is left, so its end frees the job's slot: what job.sh leaves is killed (as a node ends
# a container's processes with its main one) before the exit file is written.
_RUNNER = r"""
cd "$1" || exit 97
trap : TERM
echo $$ > .shell.pid.tmp && mv -f .shell.pid.tmp .shell.pid
if [ -n "$3" ]; then
  setpriv --reuid="${3%%:*}" --regid="${3##*:}" --clear-groups -- "$2" ./job.sh >> job.out 2>&1 </dev/null 3>&- 4>&-
else
  "$2" ./job.sh >> job.out 2>&1 </dev/null 3>&- 4>&-
fi
rc=$?
kids=unknown
read -r kids < "/proc/$$/task/$$/children" 2>/dev/null
[ -z "$kids" ] || "$4" -I -S "$5" reap "$$" 3>&- 4>&-
if [ -n "$6" ]; then
  trap '' PIPE
  printf '%s\0' "$1" >&3 2>/dev/null && read -r -d '' -t 60 _ <&4
  exec 3>&- 4>&-
fi
echo $rc > .shell.exit.tmp && mv -f .shell.exit.tmp .shell.exit
exit $rc
"""


def runner_layout(spec: JobSpec) -> bytes:
    """``spec.layout`` as the launcher reads it (empty: none, the runner makes nothing and asks no removal)."""
    if not spec.layout:
        return b""
    return _encoded_layout(spec.layout, spec.layout_marker)


@functools.lru_cache(maxsize=256)
def _encoded_layout(entries: tuple[layout.LayoutEntry, ...], marker: bool) -> bytes:
    """``containers/`` first (the submitter left it to the runner, ``prepare_job_dir(make_layout=False)``), then
    the entries. Cached: the paths are relative to the job dir, so the pods of one shape (a Job's, a campaign's)
    share their layout, and its encoding is on every launch."""
    items: list[tuple[str, str, int | str | None]] = [("d", layout.CONTAINERS_DIR, 0o700)]
    for entry in entries:
        if isinstance(entry, layout.LayoutDir):
            items.append(("d", entry.path, entry.mode))
        else:
            items.append(("l", entry.path, entry.target))
    return jobtree.encode_layout(items, marker)


def proc_start_ticks(pid: int) -> tuple[int, str] | None:
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


def is_our_runner(pid: int, job_dir: Path) -> bool:
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
    seen = proc_start_ticks(pid)
    alive = seen is not None and seen[1] != "Z"
    return alive and (LAUNCHER_NAME.encode() in argv or RUNNER_NAME.encode() in argv)


def may_still_start(job_dir: Path) -> bool:
    """A claim without a pid file whose launcher or forked runner is still alive: it is starting."""
    return _is_ours(read_int(job_dir / CLAIM_LAUNCHER)) or _is_ours(read_int(job_dir / CLAIM_RUNNER))


def read_int_and_mtime(path: Path | str) -> tuple[int, float] | None:
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


def read_int(path: Path | str) -> int | None:
    got = read_int_and_mtime(path)
    return None if got is None else got[0]


def mtime(path: Path | str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def mem_total() -> int:
    return _meminfo("MemTotal:")


def mem_available() -> int:
    """Memory a new job could take now without swapping (the kernel's estimate)."""
    return _meminfo("MemAvailable:")


def _meminfo(key: str) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(slots=True)
class RunningJob:
    """A runner the shell backend started (or adopted after a restart), while it runs."""

    pid: int
    start_ticks: int | None
    """Its start time (``/proc/<pid>/stat``), which tells it from a later process of the same pid. None while a
    pidfd watches it and nothing needed it yet (:func:`start_ticks`): most jobs end unasked."""
    job_dir: Path
    watched: bool = False
    """A pidfd tells when it ends: until then nothing about the job can change but its container files.
    ``_reap`` need not look at it either: its slot is freed by the pidfd."""
    pidfd: int | None = None
    """The pidfd while it watches the runner (closed, and None, once it fired)."""
    seen: Observation | None = None
    """The RUNNING observation a poll returns, without any I/O, while ``watched``."""


def start_ticks(run: RunningJob) -> int | None:
    """The runner's start time, read when first needed (a cancel); None once it has ended.

    Read while its pidfd says it still runs: a pid is not reused before its process has ended, so the
    ``/proc`` entry read is the runner's when the pidfd is still quiet after the read."""
    if run.start_ticks is None:
        seen = proc_start_ticks(run.pid)
        if seen is None or run.pidfd is None or pidfd_exited(run.pidfd):
            return None
        run.start_ticks = seen[0]
    return run.start_ticks


def pidfd_exited(fd: int) -> bool:
    """Whether a pidfd says its process has exited, without waiting. ``poll``, not ``select``: a submitter with a
    thousand runners holds pidfds past ``select``'s FD_SETSIZE (1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


ANSWER_LIMIT = 64 * 1024
"""The most the launcher may send without finishing an answer (a job directory and a pid): more is not the launcher
we started, and it is treated as gone."""


class _LauncherPipes(asyncio.SubprocessProtocol):
    """One launcher process's pipes. Its answers (job directory NUL pid-or-word NUL) are read in the loop's own
    callback, each resolving its launch's future there and then: a stream reader cost a task step and two
    ``readuntil`` per launch, a writer's ``drain`` one more await (the backlog it would bound is already bounded:
    one message per launch waiting for its answer)."""

    def __init__(self, launcher: Launcher) -> None:
        self._launcher = launcher
        self._pending = b""
        self.transport: asyncio.SubprocessTransport | None = None
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost = False
        """Given up (:meth:`Launcher.gone`): what it sends from then on is not read."""
        self.output_closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.SubprocessTransport, transport)  # uvloop's is one without the base class

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1 or self.lost:
            return
        parts = (self._pending + data if self._pending else data).split(b"\0")
        self._pending = parts.pop()  # what follows the last NUL: the start of the next field
        if len(parts) % 2:  # a job directory whose answer has not come yet
            self._pending = parts.pop() + b"\0" + self._pending
        if len(self._pending) > ANSWER_LIMIT:
            flooded = f"the shell launcher sent {ANSWER_LIMIT} bytes without finishing an answer"
            self._launcher.gone(self, BackendUnavailable(flooded))
            return
        for i in range(0, len(parts), 2):
            self._launcher.answered(parts[i], parts[i + 1])

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        """Its output is over (it exited: its runners hold /dev/null, not this pipe): every answer it wrote before
        has been read, so what it has not answered now never will be."""
        if fd == 1:
            self.output_closed = True
            self._launcher.gone(self, BackendUnavailable("the shell launcher exited"))
            self._close_when_done()

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)
        self._close_when_done()

    def _close_when_done(self) -> None:
        if self.lost and self.exited.done() and self.transport is not None:
            self.transport.close()  # its pipes: the process is gone, nothing to kill


class Launcher:
    """The long-lived launcher process and the launches waiting for its answer."""

    def __init__(self, bash: str, environment: Sequence[str] | None = None) -> None:
        self._bash = bash
        self._environment = DEFAULT_JOB_ENVIRONMENT if environment is None else tuple(environment)
        """What of the submitter's environment the launcher, and so every runner and job.sh, gets (the site's
        ``shell.job_environment``): the rest (the admin's tokens, ``HOME``...) is not the job's."""
        self._pipes: _LauncherPipes | None = None
        """The live launcher's pipes; None before the first launch and once it is gone (the next launch starts one)."""
        self._waiting: dict[bytes, deque[asyncio.Future[int | None]]] = {}
        self._lock = asyncio.Lock()
        self.spawned = 0
        """Launcher processes started so far (one, unless one died)."""

    async def _ensure(self) -> asyncio.WriteTransport:
        pipes = self._pipes
        if pipes is None:
            async with self._lock:
                pipes = self._pipes or await self._start()
        assert pipes.transport is not None
        return cast(asyncio.WriteTransport, pipes.transport.get_pipe_transport(0))

    async def _start(self) -> _LauncherPipes:
        loop = asyncio.get_running_loop()
        try:
            _, pipes = await loop.subprocess_exec(
                lambda: _LauncherPipes(self),
                sys.executable,
                "-I",
                "-S",
                jobtree.__file__,
                LAUNCHER_NAME,
                self._bash,
                _RUNNER,
                layout.JOB_DIR_ENV,
                env=self.launcher_environment(),
                cwd="/",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendUnavailable(f"cannot start the shell launcher ({sys.executable}): {exc}") from exc
        self.spawned += 1
        if pipes.output_closed:  # gone before we could look (it could not start its Python)
            pipes.lost = True
            if pipes.transport is not None:
                pipes.transport.close()  # and killed, were it still running
            raise BackendUnavailable("the shell launcher exited")
        self._pipes = pipes
        return pipes

    def launcher_environment(self) -> dict[str, str]:
        """The launcher's environment, which each job inherits: the listed variables of the submitter's, never its
        settings (``INTERLINK_SUBMITTER_*``); the launcher adds the job's ``INTERLINK_JOB_DIR``."""
        return job_environment(os.environ, self._environment)

    async def launch(self, spec: JobSpec, account: str = "") -> int | None:
        """Claim the job's directory and start its runner (job.sh as ``account``, "uid:gid", when given; the
        runner makes ``spec.layout`` first): the runner's pid, or None if the directory was claimed before.
        Timed as the shell backend's batch command (``launch``)."""
        with timed("launch"):
            return await self._launch(spec.job_dir, account, runner_layout(spec))

    async def _launch(self, job_dir: Path, account: str, job_layout: bytes) -> int | None:
        stdin = await self._ensure()
        if stdin.is_closing():
            raise BackendUnavailable("the shell launcher is gone")
        key = str(job_dir).encode()
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(fut)
        stdin.write(key + b"\0" + account.encode() + b"\0" + job_layout + b"\0")
        return await fut

    def answered(self, key: bytes, answer: bytes) -> None:
        """The launcher's answer for ``key``: the oldest launch of that directory gets it."""
        waiting = self._waiting.get(key)
        if not waiting:
            log.warning("shell launcher answered for a job nobody waits for: %r", key)
            return
        fut = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        if not fut.done():
            fut.set_result(int(answer) if answer.isdigit() else None)

    def gone(self, pipes: _LauncherPipes, error: BackendUnavailable) -> None:
        """The launcher of ``pipes`` exited, closed its output or misbehaved: whatever it had not answered may or
        may not have started, so the callers retry (the claim makes a retry of a started job a no-op, "claimed";
        the pid file finds its runner). A later launch starts a new launcher. Once per launcher."""
        if pipes is not self._pipes:
            return
        self._pipes = None
        pipes.lost = True
        self._fail_waiting(error)
        if pipes.transport is not None and pipes.transport.get_returncode() is None:
            with contextlib.suppress(ProcessLookupError):
                pipes.transport.kill()

    def _fail_waiting(self, error: BaseException) -> None:
        unanswered, self._waiting = self._waiting, {}
        for futs in unanswered.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(error)

    async def close(self) -> None:
        """End the launcher's input: it finishes what it was sent and exits; runners are not touched."""
        pipes, self._pipes = self._pipes, None
        if pipes is None or pipes.transport is None:
            return
        stdin = pipes.transport.get_pipe_transport(0)
        if stdin is not None:
            stdin.close()
        try:
            async with asyncio.timeout(5):  # not wait_for: on 3.11 it can swallow a cancel
                await asyncio.shield(pipes.exited)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                pipes.transport.kill()
        pipes.transport.close()
        self._fail_waiting(BackendUnavailable("the shell launcher exited"))
