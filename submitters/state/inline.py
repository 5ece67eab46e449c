"""Registry writes made on the event loop itself while the writer thread is idle (``registry.Registry._write``).

Why: each write through the writer thread is a hop there and back: two wake-ups, which on a virtual machine cost
more than the write (0.1-1.8 ms of CPU each, measured by ``bench/lifecycle.py``). Under load the writes queue while a
group commit runs and share the next one, so the hop is paid once for many; but a lone write (a Submit's mark at one
pod in flight, a Slurm job's mark as its ``sbatch`` returns, a poll's statuses) paid both alone. Here it is one
commit on the loop instead: in WAL mode with ``synchronous=NORMAL`` a commit writes into the page cache and never calls
``fsync``, so it costs the loop tens of µs.

Only while the thread is idle (nothing queued, running or on its way back), so a write never overtakes one queued
before it; and what could make the loop wait is refused rather than waited for: another process's lock (a replica
writing: ``busy_timeout`` 0, the write goes to the thread, which waits for it) and checkpoints (which ``fsync``:
``wal_autocheckpoint`` 0 here, one is queued on the thread every ``INLINE_CHECKPOINT_EVERY`` commits).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

Op = Callable[[sqlite3.Connection], object]

INLINE_CHECKPOINT_EVERY = 256
"""Inline commits between two checkpoints queued on the writer thread (the inline connection never checkpoints:
that would fsync on the event loop)."""
_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


class InlineWriter:
    """The registry's second write connection, used on the loop only: durable as the thread's writes (committed
    before the caller hears of it), never waiting for a lock or a disk flush."""

    def __init__(self, path: Path) -> None:
        conn = sqlite3.connect(path, timeout=0.0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA synchronous=NORMAL")  # per connection: FULL (the default) would fsync every commit
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute("PRAGMA busy_timeout=0")
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.commits = 0

    def transaction(self, op: Op) -> object:
        """``op`` in its own transaction; sqlite3.Error as raised (busy among them: nothing was written)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = op(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.commits += 1
        return out


def is_busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the lock (or recovers the WAL): nothing was written, the thread may wait for it.
    ``sqlite_errorcode`` is the extended code (``SQLITE_BUSY_RECOVERY`` is 261): its low byte is the primary one."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY
