"""Run a long-lived coroutine until it is told to stop: the one place every command handles signals.

Stop means SIGINT (Ctrl-C), SIGTERM (systemd, kill), SIGHUP (the terminal closed, the SSH session
dropped) and the death of the parent process (a supervisor killed with -9): each sets the same
``stop`` event, so the process drains and removes what it made instead of dying mid-call and
leaving a nats-server, jobs or a temp dir behind. ``nohup`` (SIGHUP ignored at start) is respected:
the user asked the process to outlive its terminal, so neither SIGHUP nor the parent's death stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable

from .tasks import cancel_and_wait

PARENT_POLL_S = 0.5
"""How often the parent is looked at (``getppid`` is a cheap system call)."""


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a command: INT and TERM always, HUP unless it was ignored (nohup)."""
    hup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hup)


async def _parent_gone(parent: int) -> None:
    """Return once our parent is no longer ``parent`` (we were re-parented: it died)."""
    while True:
        await asyncio.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            return


def run_until_signal(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)``; a stop signal or the parent's death sets ``stop`` so it can drain."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = stop_signals()
        for sig in signals:
            loop.add_signal_handler(sig, stop.set)
        watch: asyncio.Task[None] | None = None
        parent = os.getppid()
        if signal.SIGHUP in signals and parent > 1:  # started by init/systemd (or PID 1 itself): no parent to watch
            watch = asyncio.create_task(_parent_gone(parent), name="parent-watch")
            watch.add_done_callback(lambda _: stop.set())
        try:
            await main(stop)
        finally:
            await cancel_and_wait(watch)

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional (not on Windows)
        asyncio.run(runner())
    else:
        uvloop.run(runner())
