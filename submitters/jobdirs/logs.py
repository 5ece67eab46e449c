"""Reading log files for GetLogs: where to start (tail lines / offset), how much to send (limit bytes), chunking.

Kept separate and synchronous so the offset arithmetic is tested on plain files; the
service runs these in a thread.
"""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 64 * 1024
"""Bytes per GetLogsResponse: far below NATS's default 1 MB max_payload."""


def file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def tail_start(path: Path, lines: int, size: int) -> int:
    """Offset where the last ``lines`` lines begin (a final line without newline counts as one)."""
    if lines <= 0:
        return size
    with path.open("rb") as fh:
        pos = size
        newlines = 0
        # The very last byte being a newline ends the last line; it does not start a new one.
        if size:
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                pos = size - 1
        while pos > 0:
            step = min(8192, pos)
            fh.seek(pos - step)
            block = fh.read(step)
            for i in range(len(block) - 1, -1, -1):
                if block[i] == 0x0A:
                    newlines += 1
                    if newlines == lines:
                        return pos - step + i + 1
            pos -= step
    return 0


def start_offset(path: Path, *, offset: int, tail_lines: int | None) -> int:
    """Where reading begins: the explicit offset wins; else the first of the tail lines, else the start.

    ``limit_bytes`` plays no part here: as in Kubernetes it counts from where output starts.
    """
    size = file_size(path)
    if size is None:
        return offset
    if offset:
        return min(offset, size)
    start = 0
    if tail_lines is not None:
        start = max(start, tail_start(path, tail_lines, size))
    return start


class ByteBudget:
    """``kubectl logs --limit-bytes=N``: at most N bytes in all, counted from where output starts.

    ``None`` means no limit. Pure, so the cut is tested without files; the stream ends once it is spent.
    """

    def __init__(self, limit: int | None) -> None:
        self.left = None if limit is None else max(limit, 0)

    @property
    def spent(self) -> bool:
        return self.left is not None and self.left <= 0

    def take(self, data: bytes) -> bytes:
        """The part of ``data`` still within the limit."""
        if self.left is None:
            return data
        data = data[: self.left]
        self.left -= len(data)
        return data


def read_chunk(path: Path, offset: int, limit: int = CHUNK) -> bytes:
    """Up to ``limit`` bytes at ``offset`` (b"" at EOF or when the file is missing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)
