"""A runner's identity (its pid and start time) when its start time is read only on demand.

The shell backend no longer reads ``/proc/<pid>/stat`` at every launch: a runner watched by a pidfd has its start
time read when a cancel needs it, and only while the pidfd says it still runs (``processes.start_ticks``), so a
pid reused after the runner ended is never taken for it. Real processes, real pidfds.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from interlink_nats.submitters.backends.shell.processes import (
    RunningJob,
    pidfd_exited,
    proc_start_ticks,
    start_ticks,
)


async def test_a_watched_runners_start_time_is_read_while_it_runs_and_never_after_it_ended(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    fd = os.pidfd_open(proc.pid)
    try:
        run = RunningJob(proc.pid, None, tmp_path, watched=True, pidfd=fd)
        assert not pidfd_exited(fd)
        seen = proc_start_ticks(proc.pid)
        assert seen is not None
        assert start_ticks(run) == seen[0]  # read on demand, and kept
        proc.kill()
        await proc.wait()
        loop = asyncio.get_running_loop()
        ended = loop.create_future()
        loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
        async with asyncio.timeout(30):
            await ended
        loop.remove_reader(fd)
        assert pidfd_exited(fd)
        assert start_ticks(run) == seen[0]  # what was read while it ran stands
        fresh = RunningJob(proc.pid, None, tmp_path, watched=True, pidfd=fd)
        assert start_ticks(fresh) is None  # ended before anything asked: never read (its pid may be another's)
    finally:
        os.close(fd)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_a_runner_without_a_pidfd_has_no_start_time_to_read_later(tmp_path: Path) -> None:
    run = RunningJob(os.getpid(), None, tmp_path)
    assert start_ticks(run) is None  # the launch reads it at once when no pidfd watches the runner


async def test_a_pidfd_numbered_past_select_s_limit_still_tells_whether_its_runner_ended() -> None:
    """A submitter with a thousand runners holds pidfds numbered past FD_SETSIZE (1024), where ``select`` refuses."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    fd = os.pidfd_open(proc.pid)
    high = os.dup2(fd, 1400, inheritable=False)
    try:
        assert not pidfd_exited(high)
        proc.kill()
        await proc.wait()
        assert pidfd_exited(high)
    finally:
        os.close(high)
        os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
