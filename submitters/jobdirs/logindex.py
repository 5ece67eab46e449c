"""When were a log's bytes written? A sidecar index of (time, size) checkpoints per log file.

Why: jobs write plain log files with no timestamps (and must not be made to: the script's output
is the container's output), but GetLogs has ``since_time`` and ``timestamps``. So the submitter
watches instead: at every poll (and whenever GetLogs reads a log) it appends one line
``<unix ns> <size>`` to ``<log>.idx`` when the size changed. The bytes in (size_{k-1}, size_k]
were written in (t_{k-1}, t_k]; that interval, at most one poll interval wide, is the precision.

- ``since_time``: reading starts at the first byte written after the last checkpoint at or before
  ``since`` (moved back to the start of its line). Conservative: a line written at or after
  ``since`` is never dropped; a few lines written up to one poll interval before it may be kept.
- ``timestamps``: each line is prefixed with the time of the checkpoint at which its first byte
  was first seen, in the kubelet's format (``2026-01-02T03:04:05.123456789Z <line>``).

The index is append-only text, one ``write`` per checkpoint (``O_APPEND``: atomic for such small
lines, so replicas and readers appending at once never tear each other's lines). Parsing is
pure and tolerant: a torn or garbled line is skipped, and a checkpoint that is behind one before
it (a slower writer) is dropped, so the sizes and times used are always non-decreasing.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".idx"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """At ``time_ns`` (unix ns) the log held ``size`` bytes."""

    time_ns: int
    size: int


def index_path(log: Path) -> Path:
    return log.with_name(log.name + SUFFIX)


def format_checkpoint(cp: Checkpoint) -> bytes:
    return f"{cp.time_ns} {cp.size}\n".encode()


def parse_index(data: bytes) -> list[Checkpoint]:
    """Checkpoints in file order with non-decreasing size and time (see the module docstring)."""
    out: list[Checkpoint] = []
    for line in data.split(b"\n"):
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        cp = Checkpoint(int(parts[0]), int(parts[1]))
        if out and (cp.size <= out[-1].size or cp.time_ns < out[-1].time_ns):
            continue  # nothing new, or written by a writer that saw the file earlier than the last one
        out.append(cp)
    return out


def since_offset(index: Sequence[Checkpoint], since_ns: int) -> int:
    """Bytes known to be written before ``since_ns``: the size at the last checkpoint at or before it."""
    times = [cp.time_ns for cp in index]
    k = bisect.bisect_right(times, since_ns)
    return index[k - 1].size if k else 0


def time_of(index: Sequence[Checkpoint], offset: int) -> int | None:
    """Time of the first checkpoint that saw the byte at ``offset``; None if no checkpoint did yet."""
    sizes = [cp.size for cp in index]
    k = bisect.bisect_right(sizes, offset)
    return index[k].time_ns if k < len(index) else None


def rfc3339_nano(time_ns: int) -> str:
    """``2026-01-02T03:04:05.123456789Z``: the kubelet's timestamp format for log lines."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


class Stamper:
    """Prefixes every line of a byte stream with its checkpoint time; feed it consecutive chunks.

    ``fallback_ns`` stamps bytes no checkpoint has seen yet (they were seen by this read).
    """

    def __init__(self, index: Sequence[Checkpoint], offset: int, fallback_ns: int) -> None:
        self.index = list(index)
        self.offset = offset
        self.fallback_ns = fallback_ns
        self._at_line_start = True

    def add(self, cp: Checkpoint) -> None:
        """A newer checkpoint (a follower's read-time one); stale ones are ignored."""
        if not self.index or (cp.size > self.index[-1].size and cp.time_ns >= self.index[-1].time_ns):
            self.index.append(cp)
        self.fallback_ns = max(self.fallback_ns, cp.time_ns)

    def _stamp(self, offset: int) -> bytes:
        t = time_of(self.index, offset)
        return rfc3339_nano(self.fallback_ns if t is None else t).encode() + b" "

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos = 0
        while pos < len(data):
            if self._at_line_start:
                out.append(self._stamp(self.offset + pos))
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl + 1
            out.append(data[pos:end])
            self._at_line_start = nl >= 0
            pos = end
        self.offset += len(data)
        return b"".join(out)


# I/O (run in a thread by the service and the poller) ------------------------------------------


def record(log: Path | str, now_ns: int, last_size: int | None) -> int | None:
    """Append a checkpoint for ``log`` if its size changed since ``last_size``; returns the size seen.

    ``log`` may be a string: the poller stats every log of the jobs it looks at, and only appends on change.
    """
    try:
        size = os.stat(log).st_size
    except OSError:
        return last_size
    if size == last_size or size == 0:
        return size
    try:
        fd = os.open(index_path(Path(log)), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return last_size  # job directory gone (cancelled): nothing to index
    try:
        os.write(fd, format_checkpoint(Checkpoint(now_ns, size)))
    finally:
        os.close(fd)
    return size


def read_index(log: Path) -> list[Checkpoint]:
    try:
        return parse_index(index_path(log).read_bytes())
    except OSError:
        return []


def checkpoint_and_read(log: Path, now_ns: int) -> tuple[list[Checkpoint], int | None]:
    """Record what a reader sees now, then return the whole index and the size seen."""
    index = read_index(log)
    size = record(log, now_ns, index[-1].size if index else None)
    if size is not None and size and (not index or size > index[-1].size):
        index.append(Checkpoint(max(now_ns, index[-1].time_ns if index else 0), size))
    return index, size


def line_start(log: Path, offset: int) -> int:
    """``offset`` moved back to the start of the line it falls in (0 if unreadable)."""
    if offset <= 0:
        return 0
    try:
        fd = os.open(log, os.O_RDONLY)
    except OSError:
        return 0
    try:
        pos = offset
        while pos > 0:
            step = min(8192, pos)
            block = os.pread(fd, step, pos - step)
            nl = block.rfind(b"\n")
            if nl >= 0:
                return pos - step + nl + 1
            pos -= step
        return 0
    finally:
        os.close(fd)


def since_start(log: Path, index: Sequence[Checkpoint], since_ns: int) -> int:
    """Where reading starts for ``since_time``: see the module docstring."""
    return line_start(log, since_offset(index, since_ns))
