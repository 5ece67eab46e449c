"""Batch-system backends behind one small ``Backend`` protocol (``submitters.core.backend``), and
:data:`BACKENDS`, the one place a backend is registered.

A backend talks to its batch system only (subprocesses via ``proc.run_command``, never a shell)
and reports plain ``Observation``s; it never touches the registry, NATS or protobuf statuses.
Each backend is a package (``shell``, ``slurm``, ``htcondor``) whose ``backend`` module holds its class and
config model; pure text handling lives apart in its ``parse`` module, tested from recorded output.

Everything else is derived from :data:`BACKENDS`: the ``backend`` setting's allowed values, each
backend's settings section (``slurm:``, ``INTERLINK_SUBMITTER_SLURM__*``, validated by the backend's own
config model), the ``interlink-nats submitter <name>`` commands and their flags, and construction
(``create(config, context)``). Entries name their module instead of importing it, so a shell submitter
never imports the Slurm or HTCondor code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from pydantic import BaseModel

if TYPE_CHECKING:
    from interlink_nats.submitters.core.backend import Backend, BackendContext


class BackendClass(Protocol):
    """What a registered backend class provides besides the ``Backend`` protocol."""

    def create(self, config: Any, context: BackendContext) -> Backend: ...


@dataclass(frozen=True, slots=True)
class Flag:
    """A key of a backend's settings section offered as an option of ``interlink-nats submitter <name>``."""

    key: str
    """The section's field (``partition`` → ``--partition``)."""
    type: type[str] | type[int] | type[bool]
    """bool gives ``--key/--no-key``."""
    help: str


@dataclass(frozen=True, slots=True)
class BackendEntry:
    """One backend: where it lives, its config model and class (by name, imported when used), its CLI."""

    module: str
    config: str
    """The pydantic model of the backend's settings section, defined in ``module``."""
    backend: str
    """The class in ``module``: implements ``base.Backend`` and ``create(config, context)``."""
    help: str
    """The ``submitter <name>`` command's help."""
    flags: tuple[Flag, ...] = ()

    def config_model(self) -> type[BaseModel]:
        model = getattr(importlib.import_module(self.module), self.config)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{self.module}.{self.config} is not a pydantic model")
        return model

    def backend_class(self) -> BackendClass:
        return cast("BackendClass", getattr(importlib.import_module(self.module), self.backend))


_PACKAGE = __name__

BACKENDS: Mapping[str, BackendEntry] = {
    "shell": BackendEntry(
        f"{_PACKAGE}.shell.backend",
        "ShellConfig",
        "ShellBackend",
        help="Run pods as local processes (bash job.sh) on this host.",
        flags=(Flag("max_concurrent_jobs", int, "jobs at once (0: BuildConfig, else CPUs)"),),
    ),
    "slurm": BackendEntry(
        f"{_PACKAGE}.slurm.backend",
        "SlurmConfig",
        "SlurmBackend",
        help="Submit pods as Slurm batch jobs (sbatch/squeue/sacct/scancel/sinfo).",
        flags=(
            Flag("partition", str, "partition whose nodes are announced as capacity"),
            Flag("use_sacct", bool, "ask sacct about jobs that left squeue"),
        ),
    ),
    "htcondor": BackendEntry(
        f"{_PACKAGE}.htcondor.backend",
        "HTCondorConfig",
        "HTCondorBackend",
        help="Submit pods as HTCondor jobs (condor_submit/condor_q/condor_history/condor_rm/condor_transfer_data)."
        "\n\nToken secrets come from files or the environment (see docs/backends/htcondor.md), never from options.",
        flags=(
            Flag("mode", str, "local (submit node, shared filesystem) or remote (an HTCondor-CE)"),
            Flag("collector", str, "-pool of the condor commands (the CE's collector)"),
            Flag("schedd", str, "-name of the condor commands (the CE's schedd)"),
        ),
    ),
}
"""Every backend a submitter can run, by the name the ``backend`` setting and the CLI command use."""


def create_backend(name: str, config: BaseModel, context: BackendContext) -> Backend:
    """The backend ``name`` built from its validated settings section."""
    return BACKENDS[name].backend_class().create(config, context)
