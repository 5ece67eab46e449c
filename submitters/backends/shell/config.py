"""The ``shell`` backend's one settings model (the registry, ``backends.BACKENDS``, finds it through
:mod:`.backend`, which builds the backend from it)."""

from __future__ import annotations

from interlink_nats.submitters.core.backend import BatchCommand
from interlink_nats.submitters.core.site_policy import AccountingPolicy
from pydantic import BaseModel, ConfigDict, Field

ShellCommands = list[BatchCommand]


class ShellConfig(BaseModel):
    """The ``shell`` settings section (``INTERLINK_SUBMITTER_SHELL__*``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent_jobs: int = Field(0, ge=0)
    """Jobs running at once; 0 means the BuildConfig's value, else the number of CPUs."""
    bash: str = "bash"
    accounting: AccountingPolicy | None = None
    """Whose account a namespace's jobs run as (``run_as_*`` of each rule; docs/security.md): job.sh runs
    through ``setpriv`` as that account, which needs the submitter to be root. None: the submitter's own."""


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
