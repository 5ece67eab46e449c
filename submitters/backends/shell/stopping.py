"""Deleted shell jobs on their way out: TERM now, the job's whole process tree KILLed when the grace is over.

Why in the background: a delete answers at once (as Kubernetes' does), while the pod gets its grace period;
the job's slot stays taken until its runner ends, which it does only once nothing of its job is left
(:mod:`.jobtree`). Why the submitter's own bound: ``job.sh`` KILLs its containers after the pod's grace (the
gateway clamps it to the site's maximum), but the script comes over NATS from any client; the submitter never
trusts it and KILLs the tree at its own configured maximum (``limits.max_termination_grace_seconds`` of its
BuildConfig) plus ``kill_grace_s`` for the script's own clean-up. Closing the backend waits for these (each has
its deadline): a stopped submitter, or ``interlink-nats up``, leaves no deleted pod's process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable

from interlink_nats.kernel.pod_limits import MAX_TERMINATION_GRACE_S
from interlink_nats.submitters.backends.shell.jobtree import kill_tree
from interlink_nats.submitters.backends.shell.processes import proc_start_ticks

log = logging.getLogger(__name__)

RUNNER_END_S = 5.0
"""How long a runner may take to end once its tree is killed (it only writes its exit file) before it is killed."""
POLL_S = 0.1
"""How often a runner's end is checked where no pidfd tells it."""


class Stopping:
    """The terminations in flight, one task each."""

    def __init__(self, kill_grace_s: float) -> None:
        self.kill_grace_s = kill_grace_s
        self.max_grace_s: float = MAX_TERMINATION_GRACE_S
        """The site's longest grace period (``configure``); the KILL comes at most this plus ``kill_grace_s``
        after the TERM."""
        self._tasks_by_pid: dict[int, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._tasks_by_pid)

    async def start(self, pid: int, start_ticks: int, then: Callable[[], Awaitable[None]]) -> None:
        """TERM the runner's process group now; the rest in a task (``then`` runs once the tree is gone). A
        repeated cancel TERMs again (the script keeps its clean-up going) under the first one's deadline.

        Returns when the job ended, or after ``kill_grace_s``: a quick pod is gone when the call returns, and the
        caller removes the job's directory only after the script began its clean-up in it (preStop hooks log there).
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGTERM)
        task = self._tasks_by_pid.get(pid)
        if task is None:
            task = asyncio.create_task(self._finish(pid, start_ticks, then), name=f"shell-stop-{pid}")
            self._tasks_by_pid[pid] = task
            task.add_done_callback(lambda _: self._tasks_by_pid.pop(pid, None))
        await asyncio.wait([task], timeout=self.kill_grace_s)

    async def _finish(self, pid: int, start_ticks: int, then: Callable[[], Awaitable[None]]) -> None:
        try:
            if not await ended(pid, start_ticks, self.max_grace_s + self.kill_grace_s):
                killed = await asyncio.to_thread(kill_tree, pid)
                log.warning("job runner %d outlived the grace period: killed %d process(es) of its job", pid, killed)
                if not await ended(pid, start_ticks, RUNNER_END_S):
                    await asyncio.to_thread(kill_tree, pid)  # forked meanwhile? (the runner's exit passes them on)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            await then()
        except Exception:
            log.exception("stopping job runner %d failed", pid)

    async def close(self) -> None:
        """Wait for every termination in flight (each ends by its own deadline)."""
        while self._tasks_by_pid:
            await asyncio.gather(*self._tasks_by_pid.values(), return_exceptions=True)


def alive(pid: int, start_ticks: int) -> bool:
    seen = proc_start_ticks(pid)
    return seen is not None and seen[0] == start_ticks and seen[1] not in "ZX"


async def ended(pid: int, start_ticks: int, within: float) -> bool:
    """Whether the runner ``pid`` ends within ``within`` seconds: woken by a pidfd, else checked every ``POLL_S``."""
    loop = asyncio.get_running_loop()
    try:
        fd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        if not alive(pid, start_ticks):  # after the open: a pid reused since is not our runner
            return True
        gone: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not gone.done():
                gone.set_result(None)

        if fd is not None:
            loop.add_reader(fd, readable)
        try:
            async with asyncio.timeout(within):
                while not gone.done():
                    await asyncio.wait([gone], timeout=POLL_S if fd is None else None)
                    if fd is None and not alive(pid, start_ticks):
                        return True
            return True
        except TimeoutError:
            return not alive(pid, start_ticks)
        finally:
            if fd is not None:
                loop.remove_reader(fd)
    finally:
        if fd is not None:
            os.close(fd)
