"""One clock for every process: wall time, monotonic time, UTC timestamps and waits from one injected object.

Why: recovery, retention, liveness and status times depend on "now", and back-offs and periodic loops on
waiting; when every module asks the same injected :class:`Clock`, a test moves time (:class:`ManualClock`)
instead of sleeping, and nothing bypasses it. ``asyncio.sleep(0)`` (a bare yield) is not a wait and stays.
Parameters are named ``clock`` and typed ``Clock``, never a bare ``Callable[[], float]``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Protocol

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


class Clock(Protocol):
    """What a part that needs "now" asks for."""

    def time(self) -> float:
        """Seconds since the epoch (what registries and statuses store)."""
        ...

    def time_ns(self) -> int:
        """Nanoseconds since the epoch (log checkpoints)."""
        ...

    def monotonic(self) -> float:
        """For intervals and deadlines only: never jumps with the wall clock."""
        ...

    def utcnow(self) -> dt.datetime:
        """An aware UTC datetime (protobuf Timestamps)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of monotonic time (back-offs, retries, periodic loops)."""
        ...


class SystemClock:
    """The real time."""

    def time(self) -> float:
        return time.time()

    def time_ns(self) -> int:
        return time.time_ns()

    def monotonic(self) -> float:
        return time.monotonic()

    def utcnow(self) -> dt.datetime:
        return dt.datetime.now(tz=dt.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """Wall and monotonic time that move only by :meth:`advance` (tests).

    A :meth:`sleep` returns once :meth:`advance` has moved monotonic time to its end, never by itself: a test
    waits for a part to be sleeping (:meth:`next_sleep`, which says for how long), then advances.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start
        self.mono = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._requested: asyncio.Queue[float] | None = None  # made on first use, inside the test's loop

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds
        due = [waiter for end, waiter in self._sleepers if end <= self.mono]
        self._sleepers = [(end, waiter) for end, waiter in self._sleepers if end > self.mono]
        for waiter in due:
            if not waiter.done():
                waiter.set_result(None)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.mono + seconds, waiter))
        self._requests().put_nowait(seconds)
        try:
            await waiter
        finally:
            self._sleepers = [(end, other) for end, other in self._sleepers if other is not waiter]

    async def next_sleep(self) -> float:
        """The length of the next wait a part began (in order; waits already begun count), once it has begun."""
        return await self._requests().get()

    def _requests(self) -> asyncio.Queue[float]:
        if self._requested is None:
            self._requested = asyncio.Queue()
        return self._requested

    def time(self) -> float:
        return self.now

    def time_ns(self) -> int:
        return int(self.now * 1_000_000_000)

    def monotonic(self) -> float:
        return self.mono

    def utcnow(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now, tz=dt.UTC)
