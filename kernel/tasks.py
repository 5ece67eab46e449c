"""Stopping background tasks: one way for every process.

Why one helper: a process that stops cancels its loops and waits for them, and each place did it by hand
(cancel, then await under ``suppress``), some swallowing what the task raised and some not. Waiting with
``asyncio.wait`` never raises what a task raised, yet still lets the caller itself be cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (None and finished ones are fine) and return once each has ended.

    What a task raised on its way out is logged (debug), never raised here: the caller is stopping
    and must go on stopping the rest.
    """
    pending = {task for task in tasks if task is not None}
    if not pending:
        return
    for task in pending:
        task.cancel()
    await asyncio.wait(pending)
    for task in pending:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.debug("%r ended with %r while stopped", task, error)


async def cancel_until_done(task: asyncio.Future[Any], *, again_every_s: float = 0.5, within_s: float = 20.0) -> bool:
    """Cancel ``task`` again and again until it has ended; False if it still runs after ``within_s``.

    Why not one cancel: a library loop that catches ``CancelledError`` somewhere inside (nats-py's first-connect
    loop does, in its close path and in ``wait_for``'s race on Python 3.11) takes the one cancel as a failed attempt
    and tries again for ever, and a stop that awaits it never ends. Each further cancel lands at the loop's next
    await, so one of them reaches a place that lets it through.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not task.done():
        left = deadline - loop.time()
        if left <= 0:
            log.warning("%r did not end within %g s of being cancelled; left behind", task, within_s)
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(again_every_s, left))
    if not task.cancelled() and (error := task.exception()) is not None:
        log.debug("%r ended with %r while stopped", task, error)
    return True
