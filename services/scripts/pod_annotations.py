"""The pod annotations the renderer reads (the SLURM plugin's ``slurm-job.vk.io/*``, kept compatible).

A pod group's label and annotations (Kueue's ``kueue.x-k8s.io/pod-group-*``, ``interlink-nats.io/gang-failure-policy``,
``batch.kubernetes.io/job-completion-index``) are read in :mod:`.pod_group`."""

from __future__ import annotations

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import sbatch_grammar
from interlink_nats.kernel.backend_options import backend_options

from .errors import PodRejected
from .fields import member
from .quoting import split_words

PREFIX = "slurm-job.vk.io/"
FLAGS = PREFIX + "flags"
PRE_EXEC = PREFIX + "pre-exec"
SINGULARITY_COMMANDS = PREFIX + "singularity-commands"
SINGULARITY_MOUNTS = PREFIX + "singularity-mounts"
SINGULARITY_OPTIONS = PREFIX + "singularity-options"
IMAGE_ROOT = PREFIX + "image-root"
MPI_FLAGS = PREFIX + "mpi-flags"
FLAVOR = PREFIX + "flavor"
"""Names one of the pool's flavors (:mod:`.flavors`)."""
POD_IP = "interlink.eu/pod-ip"
"""Set by interLink when the pod has an IP; the downward API's ``status.podIP`` falls back to it."""


def field(key: str) -> str:
    """The JSON path of annotation ``key``, for rejections."""
    return member("metadata.annotations", key)


def words(text: str, key: str) -> list[str]:
    """The shell words of annotation ``key``'s value ``text``."""
    try:
        return list(split_words(text))
    except ValueError as e:
        raise PodRejected(field(key), f"cannot split into shell words: {e}") from None


def slurm_flags(text: str, bc: pb.BuildConfig) -> list[str]:
    """The words of the :data:`FLAGS` annotation. On a pool that announces its allowlist
    (``backends.slurm.allowed_pod_flags``; an older pool's ``slurm.allowed_pod_flags``) each option sbatch would
    read in them must be on it, else the pod is refused here (422 naming the annotation) rather than failed by the
    submitter, which checks again (it is the authority; ``--account`` is its accounting policy's, so it passes
    here)."""
    flags = words(text, FLAGS)
    slurm = backend_options(bc).slurm
    allow = slurm.allowed_pod_flags if slurm is not None else []
    if allow:
        try:
            sbatch_grammar.allowed(
                sbatch_grammar.parse(flags, source="pod"), frozenset(allow) | {"account"}, source="pod", shown=allow
            )
        except sbatch_grammar.FlagError as exc:
            raise PodRejected(field(FLAGS), str(exc)) from None
    return flags
