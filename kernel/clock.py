"""One clock for every process: wall time, monotonic time and UTC timestamps from one injected object.

Why: recovery, retention, liveness and status times depend on "now"; when every module asks the same
injected :class:`Clock`, a test moves time (:class:`ManualClock`) instead of sleeping, and nothing
bypasses it. Parameters are named ``clock`` and typed ``Clock``, never a bare ``Callable[[], float]``.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol

__pure__ = True  # no I/O, not even through what it imports (held by tests/test_import_contracts.py)


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


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """Wall and monotonic time that move only by :meth:`advance` (tests)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start
        self.mono = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds

    def time(self) -> float:
        return self.now

    def time_ns(self) -> int:
        return int(self.now * 1_000_000_000)

    def monotonic(self) -> float:
        return self.mono

    def utcnow(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now, tz=dt.UTC)
