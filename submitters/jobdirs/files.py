"""The thin I/O shell around job directories: create them (0700), write scripts, read container files.

The contract lives in ``interlink_nats.kernel.layout``; this module only reads and
writes it. Reads are cached per job on the ``containers/`` directory's mtime: every file the
script writes there appears by create, which bumps that mtime, and is complete once it ends in a
newline (one ``write``), so an unchanged directory whose files were complete means unchanged files
and one ``stat`` per job per poll is enough.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.names import is_dns_label, is_pod_uid
from interlink_nats.submitters.core.errors import InvalidRequest
from interlink_nats.submitters.core.requests import job_layout
from interlink_nats.submitters.core.status import ContainerFiles, container_file_number, exit_reason
from interlink_nats.submitters.jobdirs.spread import spread_subdirectories

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


JOBS_DIR = "jobs"
"""Under the state dir: one directory per job, named by its pod UID."""

REMOVING_PREFIX = ".removing-"
"""A job directory being removed is renamed to this prefix first (:func:`remove_job_dir`); never a pod UID,
which starts with a letter or digit."""


def jobs_root(state_dir: Path) -> Path:
    return state_dir / JOBS_DIR


def job_dir_for(state_dir: Path, uid: str) -> Path:
    return state_dir.joinpath(JOBS_DIR, validate_uid(uid))


def gang_dir_for(state_dir: Path, group_uid: str) -> Path:
    """A pod group's own directory (``layout.GANG_DIR``), beside the members' job directories."""
    return state_dir.joinpath(layout.GANG_DIR, validate_uid(group_uid))


def gang_dir_of(member_dir: Path, group_uid: str) -> Path:
    """:func:`gang_dir_for` from one member's job directory (``<state>/jobs/<uid>``), where no state dir is at hand."""
    return member_dir.parent.parent.joinpath(layout.GANG_DIR, group_uid)


@functools.cache
def _umask_keeps_owner_bits() -> bool:
    """Whether this process's umask leaves the owner's bits alone (022 and 077 do): then a 0700 ``mkdir`` or
    ``open`` gives exactly 0700, and a new job's directory and script need no ``chmod`` (two syscalls of the
    ten a new job costs). Read once from ``/proc/self/status``: ``os.umask`` reads it only by setting it,
    which would race with threads creating files. Unknown (no ``/proc``): assume not, and chmod."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o700 == 0
    except (OSError, ValueError, IndexError):
        pass
    return False


def prepare_job_dir(
    job_dir: Path, script: str, entries: Sequence[pb.LayoutEntry] = (), *, make_layout: bool = True
) -> Path:
    """Create the job directory (0700) with ``containers/`` (unless the runner makes it) and write the script
    (0700) atomically.

    The job-dir layout (volume directories, runtime ``none``'s links) comes in ``entries``
    (``JobScript.layout``), or, for a script rendered before that field existed, on the script's layout
    line: it is made here too, and the script, finding it there, skips the processes that would make it
    (P8). When the layout cannot be made the script makes it itself, as it would have. ``make_layout`` False:
    the backend's runner makes it and ``containers/`` (``MakesLayout``: the shell backend), and this writes only
    the job dir and the script: two inodes on the create path instead of three.

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
        spread_subdirectories(os.path.dirname(directory))  # a new jobs/ (one made before: sweep_removals)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        fresh = False  # a retried submission
    # mkdir's and open's modes are masked by the umask; a retry finds what an earlier attempt made, in any mode.
    exact_modes = fresh and _umask_keeps_owner_bits()
    if not exact_modes:
        os.chmod(directory, 0o700)
    if make_layout:  # else the runner makes ``containers/`` with the layout, and so as the job's account
        with contextlib.suppress(FileExistsError):
            os.mkdir(os.path.join(directory, layout.CONTAINERS_DIR), 0o700)
    if not script.startswith("#!"):
        script = "#!/bin/bash\n" + script  # sbatch insists on an interpreter line
    path = os.path.join(directory, layout.SCRIPT_NAME)
    # Through a rename even into a fresh directory: the claim is committed before this runs, and recovery takes a
    # ``job.sh`` that exists as stored (``engine.recovery``), so a crash mid-write must leave none, never half one.
    tmp = os.path.join(directory, f".{layout.SCRIPT_NAME}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o700)
    try:
        if not exact_modes:  # in a fresh directory the open made the file
            os.fchmod(fd, 0o700)
        data = script.encode()
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if make_layout:
        _prepare_layout(directory, script, entries, fresh)
    return Path(path)


def _prepare_layout(directory: str, script: str, proto_entries: Sequence[pb.LayoutEntry], fresh: bool) -> None:
    """Make the layout a rendered script declares. For a script that tests it (``layout.tests_marker``),
    ``.prepared`` last: a symlink to the job dir as this process names it, so ``[ .prepared -ef . ]`` in the
    script holds only where the links made here, which use that name, lead into the directory the script runs
    in. Otherwise no marker: the script tests each entry itself (``layout.PREPARED_FILE``), and a new job saves
    an inode."""
    marker = os.path.join(directory, layout.PREPARED_FILE)
    if not fresh:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)  # the script's own set-up until this pass completes
    try:
        # The field when it is set (None: a kind this submitter does not know); else the layout line of a script
        # rendered before it (compatibility path).
        entries = job_layout(proto_entries) if proto_entries else layout.parse_layout(script)
    except (InvalidRequest, ValueError):
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
        if layout.tests_marker(script):
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


JobDirItem = tuple[Path, str, Sequence[pb.LayoutEntry]]
"""What :func:`prepare_job_dir` takes: the job dir, the script and ``JobScript.layout``."""


def prepare_job_dirs(items: Sequence[JobDirItem]) -> list[Path | OSError]:
    """:func:`prepare_job_dir` for many jobs in one thread hop (Submit batches them); errors stay per job."""
    out: list[Path | OSError] = []
    for job_dir, script, entries in items:
        try:
            out.append(prepare_job_dir(job_dir, script, entries))
        except OSError as exc:
            out.append(exc)
    return out


REMOVE_ATTEMPTS = 20
REMOVE_PAUSE_S = 0.1


def remove_job_dir(job_dir: Path) -> None:
    """Remove a cancelled or deleted job's directory, even while its script is still ending.

    A cancel returns once the batch system was told (scancel does not wait), so the script's clean-up may
    still be writing exit files while this runs, and a file made during ``rmtree`` leaves the directory
    behind (``ENOTEMPTY``). So the directory is first renamed aside (atomic: its path is gone at once, and
    the script's writes by path fail), then removed, again while anything appears in it (bounded: a job
    ending goes quiet within its grace period; after the attempts, or after a crash in between, what is left
    stays under ``jobs/`` until :func:`sweep_removals` at the next start).
    """
    aside = job_dir.with_name(f"{REMOVING_PREFIX}{job_dir.name}-{os.urandom(4).hex()}")
    try:
        os.rename(job_dir, aside)
    except FileNotFoundError:
        return
    except OSError:
        aside = job_dir  # another file system under jobs/, say: removed in place
    for _ in range(REMOVE_ATTEMPTS):
        shutil.rmtree(aside, ignore_errors=True)
        if not os.path.lexists(aside):
            return
        time.sleep(REMOVE_PAUSE_S)


def remove_ended_layout(job_dir: Path, *, if_left: bool = False) -> None:
    """Remove an ended job's layout (``layout.ENDED_JOB_LAYOUT``: its volumes, secrets among them, the
    containers' rootfs and the marker), keeping logs and exit files. The script leaves this to the submitter
    where it found the submitter's layout; where it made its own, it removed it at exit and this finds nothing
    (one failed open a name). The poll calls it after it published the statuses. A link is removed, never
    followed, whatever the job's account put there (:func:`_remove_tree`).

    ``if_left``: a job whose runner removed its layout before its end could be seen (``MakesLayout``); only
    what is still there is removed (a runner that could not: its launcher was gone), for one ``lstat`` a name."""
    if if_left and not any(os.path.lexists(os.path.join(job_dir, name)) for name in layout.ENDED_JOB_LAYOUT):
        return
    try:
        fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # the job directory is gone (the pod was deleted meanwhile)
    try:
        for name in layout.ENDED_JOB_LAYOUT:
            _remove_tree(name, fd)
    except RecursionError:
        pass  # directories nested deeper than Python recurses, made by the job: removed with the pod
    finally:
        os.close(fd)


_TREE_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_tree(name: str, parent_fd: int) -> None:
    """``rm -rf`` of ``name`` in the directory ``parent_fd``, errors ignored (what is left goes with the pod's
    deletion). Like ``shutil.rmtree`` it never follows a link (``O_NOFOLLOW``: a link, or a file, is unlinked
    where a directory was expected; no ``stat`` before each open is needed for that), but with fewer system
    calls and frames per directory: on the whole-life path of every pod (``bench/lifecycle.py``)."""
    try:
        fd = os.open(name, _TREE_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    except OSError:  # ELOOP or ENOTDIR: a link or a file
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent_fd)
        return
    try:
        with os.scandir(fd) as it:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in children:
            if is_dir:
                _remove_tree(child, fd)
                continue
            try:
                os.unlink(child, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:  # replaced by a directory since the listing
                _remove_tree(child, fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent_fd)


def remove_ended_layouts(job_dirs: Iterable[tuple[Path, bool]]) -> None:
    """:func:`remove_ended_layout` for each of a poll's ended jobs (with its ``if_left``), in one thread hop."""
    for job_dir, if_left in job_dirs:
        remove_ended_layout(job_dir, if_left=if_left)


def sweep_removals(jobs: Path) -> int:
    """Remove what :func:`remove_job_dir` left behind (a crash between its rename and its last ``rmtree``, or a
    script that kept writing past the attempts); returns how many were left. Run at start, when no job of
    this instance is being removed; another replica's removal in progress is harmless to sweep with it. Also
    marks ``jobs`` to have its subdirectories spread over the file system (:mod:`.spread`: a ``jobs/`` made by an
    earlier version has no mark)."""
    spread_subdirectories(os.fspath(jobs))
    try:
        names = [e.name for e in os.scandir(jobs) if e.name.startswith(REMOVING_PREFIX)]
    except FileNotFoundError:
        return 0
    for name in names:
        shutil.rmtree(jobs / name, ignore_errors=True)
    return len(names)


def _read_small(path: str, mtime: bool) -> tuple[bytes, float | None] | None:
    """(content, mtime if asked) of a small file, with plain ``os`` calls (a poll reads these for every
    changed job, so the ``fstat`` is spent only where the mtime is used)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 256), os.fstat(fd).st_mtime if mtime else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_number(path: str, mtime: bool = True) -> tuple[float | None, float | None, bool, str]:
    """(the number, the file's mtime (None unless asked), whether the file is there but still being written,
    its text)."""
    got = _read_small(path, mtime)
    if got is None:
        return None, None, False, ""
    text = got[0].decode(errors="replace")
    value = container_file_number(text)
    return value, got[1], value is None and not text.endswith("\n"), text


def _read_files(cdir: str, names: Sequence[str]) -> tuple[dict[str, ContainerFiles], bool]:
    """The container files in ``cdir`` (a job's ``containers/``), and whether every one present was complete
    (else a later read may differ)."""
    out: dict[str, ContainerFiles] = {}
    complete = True
    for name in names:
        started, _, partial, started_text = _read_number(layout.started_file(cdir, name), mtime=False)
        code, finished, partial_exit, text = _read_number(layout.exit_file(cdir, name))
        complete = complete and not partial and not partial_exit
        reason, message = exit_reason(text) if code is not None and code != 0 else ("", "")
        ready = None
        if code is None and started_text.endswith(" readiness\n"):  # a readiness probe: its verdict changes
            got = _read_small(os.path.join(cdir, name + layout.READY_SUFFIX), False)  # in place: never cached
            ready, complete = got is not None and got[0].startswith(b"1"), False
        out[name] = ContainerFiles(
            started_at=started,
            exit_code=int(code) if code is not None else None,
            finished_at=finished if code is not None else None,
            ready=ready,
            reason=reason,
            message=message,
        )
    return out, complete


def read_container_files(job_dir: Path, names: Sequence[str]) -> dict[str, ContainerFiles]:
    return _read_files(layout.containers_dir(job_dir), names)[0]


class ContainerFilesCache:
    """Reads container files only when a job's ``containers/`` directory changed."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[int, dict[str, ContainerFiles]]] = {}

    def read(self, job_dir: Path, names: Sequence[str], cdir: str | None = None) -> dict[str, ContainerFiles]:
        """``cdir``: the ``containers/`` path as a string, when the caller keeps it (saves path building)."""
        if cdir is None:
            cdir = layout.containers_dir(job_dir)
        try:
            mtime = os.stat(cdir).st_mtime_ns
        except OSError:
            return {}
        hit = self._cache.get(job_dir)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        files, complete = _read_files(cdir, names)
        if complete and time.time_ns() - mtime > _SETTLE_NS:
            # A directory changed within the clock's granularity could change again with the same
            # mtime; only cache once it has been quiet for a while. Deliberately the host's real
            # clock, not the injected one: it is compared with the file system's own timestamps.
            # A file still being written is completed in place (no rename, no directory change): not cached.
            self._cache[job_dir] = (mtime, files)
        return files

    def forget(self, job_dir: Path) -> None:
        self._cache.pop(job_dir, None)


JOURNAL_ROTATE_BYTES = 1 << 20
"""A journal read this far is renamed aside (read to its end once more, then removed), so it stays small."""


class ChangeJournal:
    """Reads the pool's change journal (``layout.CHANGES_FILE``) from where the last read stopped.

    The job script appends its job directory's name after every file it writes in ``containers/``,
    so names read here are the jobs whose container files may have changed since the last read. Read
    the journal *before* the files: a write after that read leaves a line the next read finds.
    """

    def __init__(self) -> None:
        self._files: dict[Path, tuple[int, int]] = {}
        """Per journal: (inode, offset read up to)."""
        self._retired: dict[Path, tuple[int, int]] = {}
        """Per journal renamed aside: (inode, offset); read to its end once more, then removed."""

    def read(self, journals: Iterable[Path]) -> set[str]:
        names: set[str] = set()
        for path in journals:
            old = path.with_name(path.name + ".old")
            retired = self._retired.pop(path, None)
            if retired is not None:
                self._read_from(old, retired, names)
                with contextlib.suppress(OSError):
                    os.unlink(old)
            inode_offset = self._read_from(path, self._files.get(path), names)
            if inode_offset is None:
                self._files.pop(path, None)
                continue
            self._files[path] = inode_offset
            if inode_offset[1] >= JOURNAL_ROTATE_BYTES:
                # Writers open the file for each line: after the rename new lines go to a new file; a
                # line appended to the old one in the meantime is found by the next read of ``old``.
                with contextlib.suppress(OSError):
                    os.replace(path, old)
                    self._retired[path] = inode_offset
                    del self._files[path]
        return names

    @staticmethod
    def _read_from(path: Path, last: tuple[int, int] | None, names: set[str]) -> tuple[int, int] | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            offset = last[1] if last is not None and last[0] == st.st_ino and last[1] <= st.st_size else 0
            if st.st_size == offset:
                return st.st_ino, offset
            data = os.pread(fd, st.st_size - offset, offset)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1  # a line still being written is read next time, whole
        for line in data[:end].split(b"\n"):
            if line:
                names.add(line.decode(errors="replace"))
        return st.st_ino, offset + end


def read_member_exit(member_dir: Path) -> tuple[int | None, bool]:
    """A gang member's own exit code as its launcher recorded it (None: not yet, or none), and whether the
    launcher stopped it for another member's failure (``layout.GANG_MEMBER_EXIT``, ``GANG_MEMBER_STOPPED``)."""
    try:
        with open(os.path.join(member_dir, layout.GANG_MEMBER_EXIT), encoding="ascii") as f:
            code: int | None = int(f.read().strip())
    except (OSError, ValueError):
        code = None
    return code, os.path.exists(os.path.join(member_dir, layout.GANG_MEMBER_STOPPED))
