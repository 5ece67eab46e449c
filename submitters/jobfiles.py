"""The thin I/O shell around job directories: create them (0700), write scripts, read container files.

The contract lives in ``interlink_nats.kernel.layout``; this module only reads and
writes it. Reads are cached per job on the ``containers/`` directory's mtime: every file the
script writes there appears by create or rename, which bumps that mtime, so an unchanged
directory means unchanged files and one ``stat`` per job per poll is enough.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from interlink_nats.kernel import layout
from interlink_nats.kernel.names import is_dns_label, is_pod_uid
from interlink_nats.submitters.status import ContainerFiles

_SETTLE_NS = 2_000_000_000


class InvalidJobError(ValueError):
    """A job whose identity or container names are unsafe to use as file names."""


def validate_uid(uid: str) -> str:
    if not is_pod_uid(uid):
        raise InvalidJobError(f"invalid pod UID {uid!r}: letters, digits, '.', '_' and '-' only")
    return uid


def validate_container(name: str) -> str:
    if not is_dns_label(name):
        raise InvalidJobError(f"invalid container name {name!r}: must be a DNS label")
    return name


def job_dir_for(state_dir: Path, uid: str) -> Path:
    return state_dir / "jobs" / validate_uid(uid)


def prepare_job_dir(job_dir: Path, script: str) -> Path:
    """Create the job directory (0700) with ``containers/`` and write the script (0700) atomically.

    Idempotent, so a retried submission after a crash rewrites the same content. On the create
    path of every job, so it spends few syscalls: plain ``os`` calls on string paths, the parent
    created only when missing, the script's mode set on its open descriptor.
    """
    directory = os.fspath(job_dir)
    try:
        os.mkdir(directory, 0o700)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(directory), 0o700, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass  # a retried submission
    os.chmod(directory, 0o700)  # mkdir's mode is masked by the umask
    with contextlib.suppress(FileExistsError):
        os.mkdir(os.path.join(directory, layout.CONTAINERS_DIR), 0o700)
    if not script.startswith("#!"):
        script = "#!/bin/bash\n" + script  # sbatch insists on an interpreter line
    path = os.path.join(directory, layout.SCRIPT_NAME)
    tmp = os.path.join(directory, f".{layout.SCRIPT_NAME}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o700)
    try:
        os.fchmod(fd, 0o700)  # the open's mode is masked by the umask too
        data = script.encode()
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return Path(path)


def prepare_job_dirs(items: Sequence[tuple[Path, str]]) -> list[Path | OSError]:
    """:func:`prepare_job_dir` for many jobs in one thread hop (Submit batches them); errors stay per job."""
    out: list[Path | OSError] = []
    for job_dir, script in items:
        try:
            out.append(prepare_job_dir(job_dir, script))
        except OSError as exc:
            out.append(exc)
    return out


def remove_job_dir(job_dir: Path) -> None:
    shutil.rmtree(job_dir, ignore_errors=True)


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_exit(path: Path) -> tuple[int | None, float | None]:
    try:
        st = path.stat()
        text = path.read_text().strip()
    except OSError:
        return None, None
    try:
        return int(text.split()[0]), st.st_mtime
    except (ValueError, IndexError):
        return None, None  # being written by a script that does not rename; read again next poll


def read_container_files(job_dir: Path, names: Sequence[str]) -> dict[str, ContainerFiles]:
    out: dict[str, ContainerFiles] = {}
    for name in names:
        started = _read_float(layout.started_path(job_dir, name))
        code, finished = _read_exit(layout.exit_path(job_dir, name))
        out[name] = ContainerFiles(started_at=started, exit_code=code, finished_at=finished)
    return out


class ContainerFilesCache:
    """Reads container files only when a job's ``containers/`` directory changed."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[int, dict[str, ContainerFiles]]] = {}

    def read(self, job_dir: Path, names: Sequence[str]) -> dict[str, ContainerFiles]:
        cdir = job_dir / layout.CONTAINERS_DIR
        try:
            mtime = cdir.stat().st_mtime_ns
        except OSError:
            return {}
        hit = self._cache.get(job_dir)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        files = read_container_files(job_dir, names)
        if time.time_ns() - mtime > _SETTLE_NS:
            # A directory changed within the clock's granularity could change again with the same
            # mtime; only cache once it has been quiet for a while. Deliberately the host's real
            # clock, not the injected one: it is compared with the file system's own timestamps.
            self._cache[job_dir] = (mtime, files)
        return files

    def forget(self, job_dir: Path) -> None:
        self._cache.pop(job_dir, None)
