"""The job directory contract shared by the rendered script and every submitter backend.

A rendered script runs with its working directory set to the job directory (mode 0700,
unique per pod UID) and writes, for each container ``<name>`` (Kubernetes names are DNS labels,
so they are safe file names):

- ``containers/<name>.log``      the container's stdout and stderr;
- ``containers/<name>.started``  the start time, seconds since the epoch (written when it starts);
- ``containers/<name>.exit``     the exit code and a newline, written when it ends (one ``write``, no rename:
                                 a reader takes it only once it ends in a newline). After the code, on the
                                 same line, may come a reason and a message (``143 FailedPostStartHook
                                 PostStartHookError: ...``): why the script stopped the container.

The job's own exit code is 0 when every container succeeded, else the first failure's code.
Submitters read these files to report per-container state. The directories and links to make before the
script runs come in ``JobScript.layout`` (the proto field); older scripts declared them on a JSON layout
line, which :func:`parse_layout` still reads (the compatibility path).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

CONTAINERS_DIR = "containers"
SCRIPT_NAME = "job.sh"
JOB_STDOUT = "job.out"
LOG_SUFFIX = ".log"
STARTED_SUFFIX = ".started"
EXIT_SUFFIX = ".exit"
CHANGES_FILE = ".changes"
"""The pool's change journal, next to the job directories (in their parent): the script appends its job
directory's name, one line, after every file it writes in ``containers/``. A hint that lets a poll read
only the jobs that changed; a lost line (e.g. two NFS clients appending at once) only delays a change
until the poller's sweep reads that job anyway."""
JOB_DIR_ENV = "INTERLINK_JOB_DIR"
"""Env var set by the submitter to the job directory; the script also defaults to its cwd."""
JOB_REMOVES_LAYOUT_ENV = "INTERLINK_JOB_REMOVES_LAYOUT"
"""Set (non-empty) by a backend whose jobs run away from the submitter (Slurm): the script removes the ended
layout at exit even where the submitter made it, so the removal's file-system work is done on the job's node
instead of by the submitter on the login node, which serves every pod of the pool. The submitter's poll still
removes what a job killed outright left (then, usually, nothing)."""

GANG_DIR = "gangs"
"""Beside the job directories: ``gangs/<group uid>/`` holds what a backend writes for a whole pod group (its
launcher script, the job's own output); each member keeps its own job directory as a single pod does."""
GROUP_NAME_ENV = "INTERLINK_GROUP_NAME"
GROUP_SIZE_ENV = "INTERLINK_GROUP_SIZE"
GROUP_RANK_ENV = "INTERLINK_GROUP_RANK"
GROUP_HOSTS_ENV = "INTERLINK_GROUP_HOSTS"
GROUP_LEADER_ENV = "INTERLINK_GROUP_LEADER"
GROUP_ENV = (GROUP_NAME_ENV, GROUP_SIZE_ENV, GROUP_RANK_ENV, GROUP_HOSTS_ENV, GROUP_LEADER_ENV)
"""What a gang's launcher exports to each member's script, and the script passes on into every container of a
pod-group member (docs/pod-support.md, "Pod groups"): the group's name; how many members; this member's rank
(0-based); every member's host, comma-separated in rank order; rank 0's host. The launcher is the backend's
(one ``srun`` step per member on Slurm, one process per member on a host); the renderer only reads them."""
GANG_MEMBER_EXIT = ".gang.exit"
"""In a member's job directory: its script's exit code, written by the gang's launcher when the member ends.
Why: the gang's one job has one exit code; a member that succeeded in a failed gang (``CONTINUE``) must
still read as succeeded, so the submitter maps each member from its own code."""
GANG_MEMBER_STOPPED = ".gang.stopped"
"""In a member's job directory: written by the launcher before it stops a still-running member because
another one failed (``FAIL_GANG``), so the member's status names that reason instead of a bare SIGTERM."""


def changes_path(job_dir: Path) -> Path:
    return job_dir.parent / CHANGES_FILE


def containers_dir(job_dir: str | os.PathLike[str]) -> str:
    """``<job_dir>/containers`` as a string: the poller joins these for every job it reads, and string joins
    cost a fraction of pathlib's; the ``*_file`` functions below take it."""
    return os.path.join(job_dir, CONTAINERS_DIR)


def log_file(containers: str, container: str) -> str:
    return os.path.join(containers, container + LOG_SUFFIX)


def started_file(containers: str, container: str) -> str:
    return os.path.join(containers, container + STARTED_SUFFIX)


def exit_file(containers: str, container: str) -> str:
    return os.path.join(containers, container + EXIT_SUFFIX)


def log_path(job_dir: Path, container: str) -> Path:
    return Path(log_file(containers_dir(job_dir), container))


def started_path(job_dir: Path, container: str) -> Path:
    return Path(started_file(containers_dir(job_dir), container))


def exit_path(job_dir: Path, container: str) -> Path:
    return Path(exit_file(containers_dir(job_dir), container))


# Extensions (the rendered script's own files; submitters may read them but need not).
VOLUMES_DIR = "volumes"
"""Per-pod volume data (configMap, secret, projected, downwardAPI, emptyDir): ``volumes/<volume>/``.
Removed when the job ends (see ``ENDED_JOB_LAYOUT``); logs and exit files stay."""
ROOTFS_DIR = "rootfs"
"""Runtime ``none`` only: ``rootfs/<container>/<mountPath>`` are symlinks to the volumes, and the
container runs with ``INTERLINK_ROOTFS`` pointing at ``rootfs/<container>``. Removed when the job ends."""
DEADLINE_FILE = "deadline-exceeded"
"""Created in ``containers/`` when the script stops the pod because ``activeDeadlineSeconds`` passed: inside
``containers/`` so that it travels back with the container files where only they come back (an HTCondor-CE's
``transfer_output_files = containers``; listing the marker itself would hold every job that has none)."""

ROOTFS_ENV = "INTERLINK_ROOTFS"
READY_SUFFIX = ".ready"
"""``containers/<name>.ready``: ``1`` or ``0``, the container's readiness probe's verdict; written only for a
container with one, whose ``.started`` line then says ``readiness`` after the time."""
HOOK_SUFFIX = ".hook"
"""``containers/<name>.hook``: why a lifecycle hook stopped the container (``<Reason> <message>``), written by
the script before it kills it; the script then writes it after the code in the container's ``.exit`` file."""


def deadline_path(job_dir: Path) -> Path:
    """The marker's path (older scripts wrote ``<job_dir>/deadline-exceeded`` instead)."""
    return Path(containers_dir(job_dir), DEADLINE_FILE)


# Container labels (runtime podman): how a container is found again from outside the script, by the
# submitter's cancel and by its start-up sweep for containers whose job script is gone.
LABEL_POD_UID = "interlink-nats.pod-uid"
LABEL_CONTAINER = "interlink-nats.container"
LABEL_JOB_DIR = "interlink-nats.job-dir"
"""The job directory (absolute, as the script saw it): its runner pid file tells whether the job still runs."""


# The job-dir layout a rendered script declares (P8). Making directories and symlinks costs a
# process each in bash; the submitter makes them in the pass that writes the script instead, and the script
# only makes them itself when the submitter did not (a standalone run, an HTCondor sandbox, a rerun).
PREPARED_FILE = ".prepared"
"""Made last by the submitter's job-dir preparation for a script that tests it (:func:`tests_marker`): a symlink to
the job dir (absolute, as the submitter names it, like the links' targets). Such a script skips its own set-up
(job dir 0700, ``containers/``, the layout) when ``[ .prepared -ef . ]`` (the name leads to the directory it runs
in). Only a layout with a link to something the script writes itself (a ``subPath`` to a file) is rendered with
that test now: every other layout is tested entry by entry (``containers/`` too; a link with ``-ef`` against its
target directory, which holds only where the submitter's absolute link leads into the directory the script runs
in), so a rerun after the clean-up removed it, or a half-made layout, fails the test, and a new job saves the
marker's inode (made, then freed when the job ends: tens of microseconds of the submitter's kernel time)."""
PREPARED_TEST = f"[ {PREPARED_FILE} -ef . ]"
"""The marker's test, as rendered scripts spell it."""
JOBS_FILE = ".jobs"
"""Written by the script only after a cancel, when a container it waits for is gone: ``jobs -rp``'s answer, read
back with builtins, to tell whether bash lost that container's status (see the template's ``__lost``)."""
GANG_MEMBER_JOBS = ".gang.jobs"
"""The same check by the shell gang launcher's per-member wrapper, in the member's directory (its own file: the
member's script may write ``JOBS_FILE`` at the same moment)."""
ENDED_JOB_LAYOUT = (PREPARED_FILE, VOLUMES_DIR, ROOTFS_DIR)
"""What is removed when a job ends (volume data, secrets among it, off the site's disk at once; logs and exit
files stay until the pod is deleted). Whoever made the layout removes it: where the submitter made one
(``JobScript.layout``) and the script's test found it, the submitter, when its poll sees the job end (no process
in the script: ``rm -rf`` cost a fork and an exec per job, a third of the script's own CPU); where the script made
it itself (a run by hand, an HTCondor sandbox, a rerun after the clean-up, a layout of host links only), the
script, at exit. Scripts rendered before remove it at exit either way; the submitter's removal then finds
nothing."""
LAYOUT_PREFIX = "# interlink-nats layout: "
"""The layout line (JSON, one line) among the first lines of a script rendered before ``JobScript.layout``
existed: read by :func:`parse_layout` so such scripts, still queued or retried, keep their prepared layout."""
_LAYOUT_WINDOW = 1024
_LAYOUT_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
"""One encoder for every script: ``json.dumps`` with options builds a new one per call (~3 µs a render)."""
_MODE = re.compile("0[0-7]{3}")


@dataclass(frozen=True, slots=True)
class LayoutDir:
    """A directory below the job dir, made like ``mkdir -p`` under umask 077, then set to ``mode`` when given."""

    path: str
    mode: int | None = None


@dataclass(frozen=True, slots=True)
class LayoutLink:
    """A symlink below the job dir to ``<job dir>/<target>`` (its parent made like a :class:`LayoutDir`)."""

    path: str
    target: str


LayoutEntry = LayoutDir | LayoutLink


def needs_marker(entries: Sequence[LayoutEntry]) -> bool:
    """Whether the script learns from ``PREPARED_FILE`` that the layout was made, rather than from testing each
    entry: only when a link leads to something that is not one of the layout's directories (a file the script
    writes later, through a ``subPath``), which ``-ef`` cannot test before it exists."""
    dirs = {e.path for e in entries if isinstance(e, LayoutDir)}
    return any(isinstance(e, LayoutLink) and e.target not in dirs for e in entries)


def tests_marker(script: str) -> bool:
    """Whether a rendered script tests ``PREPARED_FILE`` (:func:`needs_marker`, or any script with links rendered
    before the entries were tested one by one): the submitter then makes the marker last."""
    return PREPARED_TEST in script


def layout_line(entries: list[LayoutEntry]) -> str:
    """The layout line an older renderer wrote (no newline): kept to make such scripts in tests of the
    compatibility path; JSON escapes every control character, so it stays one line."""
    items: list[list[str | None]] = []
    for e in entries:
        if isinstance(e, LayoutDir):
            items.append(["d", e.path, None if e.mode is None else f"{e.mode:04o}"])
        else:
            items.append(["l", e.path, e.target])
    return LAYOUT_PREFIX + _LAYOUT_JSON.encode(items)


def below_job_dir(path: object) -> str:
    """``path`` when it names something below the job dir (relative, no ``..``); ValueError otherwise."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\x00" in path or ".." in path.split("/"):
        raise ValueError(f"layout: not a path below the job dir: {path!r}")
    return path


def parse_layout(script: str) -> list[LayoutEntry] | None:
    """The entries of a script's layout line; None when it has none (a script rendered with
    ``JobScript.layout``, or not rendered at all). The compatibility path for scripts of older renderers.

    Raises ValueError when the line is malformed or names a path outside the job dir."""
    start = script.find("\n" + LAYOUT_PREFIX, 0, _LAYOUT_WINDOW)
    if start < 0:
        return None
    start += 1 + len(LAYOUT_PREFIX)
    end = script.find("\n", start)
    return list(_parse_entries(script[start : end if end >= 0 else len(script)]))


@lru_cache(maxsize=256)
def _parse_entries(text: str) -> tuple[LayoutEntry, ...]:
    """A layout line's JSON, parsed once per distinct line: every Submit of a pod shape repeats the same one."""
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"layout: not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ValueError("layout: not a list")
    out: list[LayoutEntry] = []
    for item in items:
        match item:
            case ["d", path, None]:
                out.append(LayoutDir(below_job_dir(path)))
            case ["d", path, str(mode)] if _MODE.fullmatch(mode):
                out.append(LayoutDir(below_job_dir(path), int(mode, 8)))
            case ["l", path, target]:
                out.append(LayoutLink(below_job_dir(path), below_job_dir(target)))
            case _:
                raise ValueError(f"layout: bad entry {item!r}")
    return tuple(out)
