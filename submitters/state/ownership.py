"""Instance ownership: the flock that tells replicas sharing a registry whether an owner is alive.

Why a lock file and not a heartbeat: the kernel drops an flock the moment its process dies
(even on kill -9), so a crashed replica's jobs can be adopted at once, without timeouts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from interlink_nats.submitters.core.errors import SubmitterError


class InstanceLock:
    """An flock held for the life of the process: its absence tells replicas we are gone."""

    def __init__(self, directory: Path, instance_id: str) -> None:
        self.directory = directory
        self.instance_id = instance_id
        self.path = directory / f"{instance_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SubmitterError(f"instance id already in use here: {self.path}") from exc
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self._fd)
            self._fd = None

    def owner_is_dead(self, instance_id: str) -> bool:
        """True when no live process holds the lock of ``instance_id`` (another replica) beside ours."""
        return self.is_dead(self.directory, instance_id)

    @staticmethod
    def is_dead(directory: Path, instance_id: str) -> bool:
        """True when no live process holds ``instance_id``'s lock on this host."""
        path = directory / f"{instance_id}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        else:
            with contextlib.suppress(OSError):
                path.unlink()
            return True
        finally:
            os.close(fd)
