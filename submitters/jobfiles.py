"""The thin I/O shell around job directories: create them (0700), write scripts, read container files.

The contract lives in ``interlink_nats.kernel.layout``; this module only reads and
writes it. Reads are cached per job on the ``containers/`` directory's mtime: every file the
script writes there appears by create, which bumps that mtime, and is complete once it ends in a
newline (one ``write``), so an unchanged directory whose files were complete means unchanged files
and one ``stat`` per job per poll is enough.
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
from interlink_nats.submitters.status import ContainerFiles, container_file_number

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

    A rendered script declares its job-dir layout (volume directories, runtime ``none``'s links): it is made
    here too, then ``.prepared`` says so, and the script skips the processes that would make it (issue 14, P8).
    When the layout cannot be made the script makes it itself, as it would have.

    Idempotent, so a retried submission after a crash rewrites the same content. On the create
    path of every job, so it spends few syscalls: plain ``os`` calls on string paths, the parent
    created only when missing, the script's mode set on its open descriptor.
    """
    directory = os.fspath(job_dir)
    fresh = True
    try:
        os.mkdir(directory, 0o700)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(directory), 0o700, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        fresh = False  # a retried submission
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
    _prepare_layout(directory, script, fresh)
    return Path(path)


def _prepare_layout(directory: str, script: str, fresh: bool) -> None:
    """Make the layout a rendered script declares, then ``.prepared`` last: a symlink to the job dir as
    this process names it, so ``[ .prepared -ef . ]`` in the script holds only where the links made here,
    which use that name, lead into the directory the script runs in. One syscall, no file to write."""
    marker = os.path.join(directory, layout.PREPARED_FILE)
    if not fresh:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)  # the script's own set-up until this pass completes
    try:
        entries = layout.parse_layout(script)
    except ValueError:
        return
    if entries is None:
        return
    absolute = os.path.abspath(directory)
    made: set[str] = set()
    try:
        for entry in entries:
            path = os.path.join(directory, entry.path)
            if isinstance(entry, layout.LayoutDir):
                _make_dirs(directory, entry.path, made)
                if entry.mode is not None:
                    os.chmod(path, entry.mode)
                continue
            _make_dirs(directory, entry.path.rpartition("/")[0], made)
            target = os.path.join(absolute, entry.target)
            try:
                os.symlink(target, path)
            except FileExistsError:  # like `ln -sfn`: a link or file there is replaced
                os.unlink(path)
                os.symlink(target, path)
        os.symlink(absolute, marker)
    except OSError:
        return  # the script makes what is missing itself


def _make_dirs(directory: str, rel: str, made: set[str]) -> None:
    """``mkdir -p`` below the job dir, parents first (a fresh job dir: no failed attempt), 0700 directories
    like the script's umask 077 gives; an existing directory or link to one is kept, as ``mkdir -p`` does."""
    if not rel or rel in made:
        return
    _make_dirs(directory, rel.rpartition("/")[0], made)
    path = os.path.join(directory, rel)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    made.add(rel)


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


def _read_number(path: Path) -> tuple[float | None, float | None, bool]:
    """(the number, the file's mtime, whether the file is there but still being written)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode(errors="replace")
            mtime = os.fstat(fh.fileno()).st_mtime
    except OSError:
        return None, None, False
    value = container_file_number(text)
    return value, mtime, value is None and not text.endswith("\n")


def _read_files(job_dir: Path, names: Sequence[str]) -> tuple[dict[str, ContainerFiles], bool]:
    """The container files, and whether every one present was complete (else a later read may differ)."""
    out: dict[str, ContainerFiles] = {}
    complete = True
    for name in names:
        started, _, partial = _read_number(layout.started_path(job_dir, name))
        code, finished, partial_exit = _read_number(layout.exit_path(job_dir, name))
        complete = complete and not partial and not partial_exit
        out[name] = ContainerFiles(
            started_at=started,
            exit_code=int(code) if code is not None else None,
            finished_at=finished if code is not None else None,
        )
    return out, complete


def read_container_files(job_dir: Path, names: Sequence[str]) -> dict[str, ContainerFiles]:
    return _read_files(job_dir, names)[0]


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
        files, complete = _read_files(job_dir, names)
        if complete and time.time_ns() - mtime > _SETTLE_NS:
            # A directory changed within the clock's granularity could change again with the same
            # mtime; only cache once it has been quiet for a while. Deliberately the host's real
            # clock, not the injected one: it is compared with the file system's own timestamps.
            # A file still being written is completed in place (no rename, no directory change): not cached.
            self._cache[job_dir] = (mtime, files)
        return files

    def forget(self, job_dir: Path) -> None:
        self._cache.pop(job_dir, None)
