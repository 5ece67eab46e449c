"""The ``shell`` backend's one settings model (the registry, ``backends.BACKENDS``, finds it through
:mod:`.backend`, which builds the backend from it)."""

from __future__ import annotations

import os

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.backend_options import backend_options
from interlink_nats.submitters.backends import job_environment as je
from interlink_nats.submitters.core.backend import BatchCommand
from interlink_nats.submitters.core.site_policy import AccountingPolicy
from pydantic import BaseModel, ConfigDict, Field

ShellCommands = list[BatchCommand]


class ShellConfig(BaseModel):
    """The ``shell`` settings section (``INTERLINK_SUBMITTER_SHELL__*``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent_jobs: int = Field(0, ge=0)
    """Jobs running at once; 0 means the BuildConfig's value (:func:`pool_slots`)."""
    bash: str = "bash"
    accounting: AccountingPolicy | None = None
    """Whose account a namespace's jobs run as (``run_as_*`` of each rule; docs/security.md): job.sh runs
    through ``setpriv`` as that account, which needs the submitter to be root. None: the submitter's own."""
    job_environment: je.JobEnvironment = je.DEFAULT_JOB_ENVIRONMENT
    """The submitter's environment variables every ``job.sh`` gets (through the launcher), by name or ``PREFIX*``;
    besides them only what interlink-nats sets (``INTERLINK_JOB_DIR``...). The submitter's settings
    (``INTERLINK_SUBMITTER_*``) never, even if listed."""


def pool_slots(build_config: pb.BuildConfig) -> int:
    """Jobs running at once where the section's ``max_concurrent_jobs`` is 0: the pool's BuildConfig's
    (``backends.shell.max_concurrent_jobs``, or an older file's ``shell``), else the CPUs this process may use."""
    shell = backend_options(build_config).shell
    return (shell.max_concurrent_jobs if shell is not None else 0) or (len(os.sched_getaffinity(0)) or 1)


def shell_commands(bash: str, accounting: AccountingPolicy | None, podman: str | None) -> ShellCommands:
    """``ShellBackend.commands``: bash (the launcher and every job); setpriv when the site table switches
    accounts; podman (the BuildConfig's ``executable``) while the pool's runtime is podman, which the jobs
    run on this host."""
    out = [BatchCommand(bash, "shell.bash")]
    if accounting is not None and accounting.switches_accounts:
        out.append(BatchCommand("setpriv", ""))
    if podman is not None:
        out.append(BatchCommand(podman, "build_config.executable"))
    return out
