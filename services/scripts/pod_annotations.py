"""The pod annotations the renderer reads (the SLURM plugin's ``slurm-job.vk.io/*``, kept compatible).

A pod group's label and annotations (Kueue's ``kueue.x-k8s.io/pod-group-*``, ``interlink-nats.io/gang-failure-policy``,
``batch.kubernetes.io/job-completion-index``) are read in :mod:`.pod_group`."""

from __future__ import annotations

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
