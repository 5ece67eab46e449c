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
