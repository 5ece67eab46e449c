"""Run a long-lived coroutine until it is told to stop: the one place every command handles signals.

Stop means SIGINT (Ctrl-C), SIGTERM (systemd, kill), SIGHUP (the terminal closed, the SSH session
dropped) and the death of the parent process (a supervisor killed with -9): each sets the same
``stop`` event, so the process drains and removes what it made instead of dying mid-call and
leaving a nats-server, jobs or a temp dir behind. ``nohup`` (SIGHUP ignored at start) is respected:
the user asked the process to outlive its terminal, so neither SIGHUP nor the parent's death stops it.

A daemon (the submitter, the gateway) passes ``reload``: SIGHUP then sets that event instead of stopping,
as nats-server, slurmctld and sshd re-read their configuration on HUP; ``up``, a terminal program, does not.
Every stop logs one line naming its cause (a fatal error is the CLI's one error line instead); a terminal program
(``up``, which logs only warnings by default) prints it instead, so its user sees why it stopped at every level.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable

from .tasks import cancel_and_wait

log = logging.getLogger("interlink_nats.signals")

PARENT_POLL_S = 0.5
"""How often the parent is looked at where no pidfd can watch it (``getppid`` is a cheap system call)."""


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a command: INT and TERM always, HUP unless it was ignored (nohup)."""
    hup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hup)


async def _parent_gone(parent: int) -> None:
    """Return once our parent is no longer ``parent`` (it died: we were re-parented).

    A pidfd on the parent turns readable when it exits, so a daemon that does nothing is not woken for it: on a
    virtual machine each wake-up of an idle process costs it CPU (a bare 0.5 s sleep loop: 0.2-2 ms per turn on
    the 2026-11-29 host, ``bench/lifecycle.py`` prints it). Without pidfds (Linux < 5.3) ``getppid`` is polled."""
    try:
        pidfd = os.pidfd_open(parent)
    except OSError:  # no pidfd here, or the parent is gone already (the check below says which)
        pidfd = -1
    while pidfd < 0:
        if os.getppid() != parent:
            return
        await asyncio.sleep(PARENT_POLL_S)
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()
    try:
        if os.getppid() != parent:  # it died before the pidfd opened: the pid may be another process's now
            return
        loop.add_reader(pidfd, lambda: None if exited.done() else exited.set_result(None))
        try:
            await exited
        finally:
            loop.remove_reader(pidfd)
    finally:
        os.close(pidfd)


def log_stop(cause: str) -> None:
    """A daemon's stop line: logged, at info."""
    log.info("stopping: %s", cause)


def _stopper(stop: asyncio.Event, cause: str, say: Callable[[str], None]) -> Callable[[], None]:
    """A handler that says ``cause`` once (a second Ctrl-C while draining says nothing new) and sets ``stop``."""

    def handler() -> None:
        if not stop.is_set():
            say(cause)
        stop.set()

    return handler


def run_until_signal(
    main: Callable[[asyncio.Event], Awaitable[None]],
    *,
    reload: asyncio.Event | None = None,
    say_stop: Callable[[str], None] = log_stop,
) -> None:
    """Run ``main(stop)``; a stop signal or the parent's death sets ``stop`` so it can drain.

    With ``reload``, SIGHUP sets it instead (``main`` re-reads its configuration and clears it). ``say_stop`` is
    given the stop's cause once (``SIGINT received``, ``the parent process (42) died``)."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = stop_signals()
        for sig in signals:
            if sig == signal.SIGHUP and reload is not None:
                loop.add_signal_handler(sig, reload.set)
            else:
                loop.add_signal_handler(sig, _stopper(stop, f"{sig.name} received", say_stop))
        watch: asyncio.Task[None] | None = None
        parent = os.getppid()
        if signal.SIGHUP in signals and parent > 1:  # started by init/systemd (or PID 1 itself): no parent to watch
            watch = asyncio.create_task(_parent_gone(parent), name="parent-watch")
            gone = _stopper(stop, f"the parent process ({parent}) died", say_stop)
            watch.add_done_callback(lambda task: None if task.cancelled() else gone())
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
