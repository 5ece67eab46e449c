"""What one container needs to start, as typed values: the runtimes turn a :class:`Launch` into shell lines.

Not frozen: a frozen dataclass pays one ``object.__setattr__`` per field, and a pod builds dozens of these.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.kernel.layout import LayoutDir, LayoutLink

from .pod_resources import ContainerResources
from .quoting import MASK, quote, quote_field

_MASKED_WORD = quote(MASK)


@dataclass(slots=True)
class EnvVar:
    """One environment variable, in Kubernetes order (envFrom, then env; later wins)."""

    name: str
    value: str
    secret: bool
    index: int = -1
    """Its position in the container's ``env``; -1: one of an ``envFrom`` entry's keys (``source``)."""
    source: str = ""
    """The ``envFrom`` entry it comes from (``spec.containers[0].envFrom[1]``), when not from ``env``."""

    def field(self, where: str) -> str:
        """The JSON path of the entry the variable comes from, for a rejection (``where``: the container's)."""
        return self.source or f"{where}.env[{self.index}]"

    def word(self, prefix: str, where: str, mask: bool) -> str:
        """``PREFIX+NAME=value`` as one quoted shell word; a masked secret shows ``'***'``."""
        if mask and self.secret:
            return quote_field(prefix + self.name + "=", f"{where}.env") + _MASKED_WORD
        word = f"{prefix}{self.name}={self.value}"
        return quote(word) if "\x00" not in word else quote_field(word, self.field(where))  # path: on error only


def passthrough_word(name: str, prefix: str) -> str:
    """``PREFIX+NAME=$NAME`` as one shell word when ``NAME`` is set in the script, no word at all when it is not.

    ``name`` is one of the fixed ``layout.GROUP_ENV`` names (never pod input), so it needs no quoting."""
    return f'${{{name}+"{prefix}{name}=${name}"}}'


@dataclass(slots=True)
class MountPoint:
    """A volume as a container sees it: ``source`` (below the job dir, or a host path) at ``target``."""

    source: str
    under_job_dir: bool
    target: str
    read_only: bool

    def bind_word(self, where: str) -> str:
        """``source:target[:ro]`` as one shell word; a job-dir source is made absolute at run time."""
        spec = f"{self.source}:{self.target}" + (":ro" if self.read_only else "")
        return f'"$__job_dir"/{quote(spec)}' if self.under_job_dir else quote_field(spec, where)


@dataclass(slots=True)
class Image:
    """The image reference to run, and a local image file to try first at run time (apptainer ``image_dir``)."""

    remote: str
    local: str | None = None


@dataclass(slots=True)
class Launch:
    """One container of the pod, checked and expanded; every ``*_words`` field is already shell-quoted."""

    name: str
    where: str  # the container's JSON path, for rejections
    env: list[EnvVar]
    command: list[str]  # expanded, not quoted (podman's --entrypoint takes it as JSON)
    command_words: list[str]
    args_words: list[str]
    workdir: str
    mounts: list[MountPoint]
    resources: ContainerResources
    mpi: tuple[str, ...]  # the pod's mpi-flags words (not quoted); empty for init containers
    image: Image | None  # None for a runtime without images
    mask: bool
    engine_name: str = ""  # the container's name in the engine (quoted), when a hook must find it (podman exec)
    passthrough: tuple[str, ...] = ()
    """Names passed from the job script's own environment at run time, when set there (a pod-group member's
    ``layout.GROUP_ENV``, which the gang's launcher exports); never one the container's ``env`` sets itself."""


@dataclass(slots=True)
class PodOptions:
    """What the pool's BuildConfig and the pod's annotations add to every container's command line (quoted)."""

    executable: str
    runtime_flags: tuple[str, ...]
    binds: tuple[str, ...]
    global_options: tuple[str, ...]  # slurm-job.vk.io/singularity-commands
    options: tuple[str, ...]  # slurm-job.vk.io/singularity-options and -mounts
    pod_label: str  # `interlink-nats.pod-uid=<uid>`, quoted: how a runtime that labels containers finds them again


@dataclass(slots=True)
class StopCommands:
    """Pod-level lines for a runtime whose containers outlive their client process (podman)."""

    after_grace: tuple[str, ...] = ()  # run when the grace period after a TERM has passed, before the KILL
    at_exit_if_cancelled: tuple[str, ...] = ()  # run by the script's clean-up when the pod was cancelled


@dataclass(frozen=True, slots=True)
class HostLink:
    """A symlink below the job dir to a host path (runtime ``none``, a hostPath mount): the script makes it
    itself, since the submitter may run on another host."""

    path: str
    source: str  # absolute, not quoted
    where: str  # the mount's JSON path, for rejections


SetupEntry = LayoutDir | LayoutLink | HostLink
"""What the job dir needs before any container starts (made in order; duplicates made once)."""


@dataclass(slots=True)
class ContainerCommands:
    """A container's set-up (made before any container starts) and the shell lines (``body``) that start it."""

    setup: tuple[SetupEntry, ...]
    body: tuple[str, ...]
