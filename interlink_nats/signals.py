"""Run a long-lived coroutine until SIGINT/SIGTERM: the one place every command handles signals."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable


def run_until_signal(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)``; SIGINT/SIGTERM set ``stop`` so it can drain instead of dying mid-call."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional (not on Windows)
        asyncio.run(runner())
    else:
        uvloop.run(runner())
