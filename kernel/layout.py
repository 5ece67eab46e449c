"""The job directory contract shared by the rendered script and every submitter backend.

A rendered script runs with its working directory set to the job directory (mode 0700,
unique per pod UID) and writes, for each container ``<name>`` (Kubernetes names are DNS labels,
so they are safe file names):

- ``containers/<name>.log``      the container's stdout and stderr;
- ``containers/<name>.started``  the start time, seconds since the epoch (written when it starts);
- ``containers/<name>.exit``     the exit code, written atomically when it ends.

The job's own exit code is 0 when every container succeeded, else the first failure's code.
Submitters read these files to report per-container state; nothing else is parsed.
"""

from __future__ import annotations

from pathlib import Path

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


def changes_path(job_dir: Path) -> Path:
    return job_dir.parent / CHANGES_FILE


def log_path(job_dir: Path, container: str) -> Path:
    return job_dir / CONTAINERS_DIR / f"{container}{LOG_SUFFIX}"


def started_path(job_dir: Path, container: str) -> Path:
    return job_dir / CONTAINERS_DIR / f"{container}{STARTED_SUFFIX}"


def exit_path(job_dir: Path, container: str) -> Path:
    return job_dir / CONTAINERS_DIR / f"{container}{EXIT_SUFFIX}"


# Extensions (the rendered script's own files; submitters may read them but need not).
VOLUMES_DIR = "volumes"
"""Per-pod volume data (configMap, secret, projected, downwardAPI, emptyDir): ``volumes/<volume>/``.
Removed by the script when it exits; logs and exit files stay."""
ROOTFS_DIR = "rootfs"
"""Runtime ``none`` only: ``rootfs/<container>/<mountPath>`` are symlinks to the volumes, and the
container runs with ``INTERLINK_ROOTFS`` pointing at ``rootfs/<container>``. Removed at exit."""
DEADLINE_FILE = "deadline-exceeded"
"""Created when the script stops the pod because ``activeDeadlineSeconds`` passed."""
ROOTFS_ENV = "INTERLINK_ROOTFS"

# Container labels (runtime podman): how a container is found again from outside the script, by the
# submitter's cancel and by its start-up sweep for containers whose job script is gone.
LABEL_POD_UID = "interlink-nats.pod-uid"
LABEL_CONTAINER = "interlink-nats.container"
LABEL_JOB_DIR = "interlink-nats.job-dir"
"""The job directory (absolute, as the script saw it): its runner pid file tells whether the job still runs."""
