"""One clock for the whole submitter: wall time, monotonic time and UTC timestamps from one object.

Why: recovery, retention and status times depend on "now"; when every module asks the same
injected clock, a test can move time instead of sleeping, and nothing bypasses it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable


class Clock:
    """Real time by default; ``wall`` replaces the wall clock (and everything derived from it)."""

    def __init__(self, wall: Callable[[], float] | None = None, monotonic: Callable[[], float] | None = None) -> None:
        self._wall = wall
        self._monotonic = monotonic or time.monotonic

    def time(self) -> float:
        """Seconds since the epoch (what the registry and statuses store)."""
        return self._wall() if self._wall is not None else time.time()

    def time_ns(self) -> int:
        """Nanoseconds since the epoch (log checkpoints)."""
        return int(self._wall() * 1_000_000_000) if self._wall is not None else time.time_ns()

    def monotonic(self) -> float:
        """For intervals and deadlines only: never jumps with the wall clock."""
        return self._monotonic()

    def utcnow(self) -> dt.datetime:
        """An aware UTC datetime (protobuf Timestamps)."""
        return dt.datetime.fromtimestamp(self.time(), tz=dt.UTC)


SYSTEM_CLOCK = Clock()


def as_clock(clock: Clock | Callable[[], float] | None) -> Clock:
    """Accept a :class:`Clock`, a bare wall-clock function (the older ``clock=time.time`` form) or None."""
    if clock is None:
        return SYSTEM_CLOCK
    if isinstance(clock, Clock):
        return clock
    return Clock(wall=clock)
