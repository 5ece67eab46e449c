"""The parent watch of every long-lived command (``kernel.signals``): it returns once the parent died, through
a pidfd (no wake-up before) or, where pidfds are missing, by polling ``getppid``.

Real processes: a parent (``MIDDLE``) starts a child that watches it, the test kills the parent -9 and waits for
the child's word. ``test_stop_signals`` checks the same end to end for each command.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
from interlink_nats.kernel import signals

DEADLINE_S = 60.0
WATCHER = """
import asyncio, os, sys
from interlink_nats.kernel import signals
if sys.argv[1] == "no-pidfd":  # a kernel before 5.3
    def pidfd_open(pid, flags=0):
        raise OSError(38, "Function not implemented")
    os.pidfd_open = pidfd_open
    signals.PARENT_POLL_S = 0.05
async def main():
    parent = os.getppid()
    print("watching", flush=True)
    await signals._parent_gone(parent)
    print("gone", os.getppid() != parent, flush=True)
asyncio.run(main())
"""
MIDDLE = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(3600)"
"""The parent: starts the watcher (its stdout is the test's pipe) and waits to be killed."""


@pytest.mark.parametrize("how", ["pidfd", "no-pidfd"])
def test_the_watch_returns_once_the_parent_is_killed(how: str) -> None:
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, sys.executable, "-c", WATCHER, how], stdout=subprocess.PIPE, text=True
    )
    assert middle.stdout is not None
    try:
        assert middle.stdout.readline().strip() == "watching"
        middle.send_signal(signal.SIGKILL)
        middle.wait(DEADLINE_S)
        # the pipe stays open in the watcher alone: its next line comes once it saw the parent gone
        assert middle.stdout.readline().strip() == "gone True"
    finally:
        middle.kill()
        middle.wait(DEADLINE_S)
        middle.stdout.close()


def test_a_parent_gone_already_is_seen_at_once() -> None:
    """A parent that died before the watch started: the pid is not ours any more (it may be another process's)."""

    async def watch() -> None:
        await asyncio.wait_for(signals._parent_gone(os.getpid()), DEADLINE_S)  # never our parent

    asyncio.run(watch())


def test_with_a_pidfd_nothing_wakes_the_watch_while_the_parent_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle daemon is not woken for its parent: no timer runs while the pidfd is quiet."""
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def counting_sleep(delay: float, result: object = None) -> object:
        slept.append(delay)
        return await real_sleep(delay, result)

    monkeypatch.setattr(signals.asyncio, "sleep", counting_sleep)

    async def watch() -> bool:
        task = asyncio.ensure_future(signals._parent_gone(os.getppid()))  # pytest's parent lives on
        done, _ = await asyncio.wait({task}, timeout=3 * signals.PARENT_POLL_S)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return bool(done)

    assert asyncio.run(watch()) is False
    assert slept == []
