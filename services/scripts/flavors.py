"""A pod's flavor (the SLURM plugin's ``Flavors``): which of the pool's named defaults it gets, and what they fill.

Chosen as the plugin chooses — the ``slurm-job.vk.io/flavor`` annotation, else a GPU flavor for a pod asking
for GPUs, else the pool's ``default_flavor`` — but strictly: a name the pool lacks is rejected (the plugin
falls back silently, so a typo ran the pod with other resources), and a GPU flavor is one marked ``gpu``
(the plugin guesses from ``--gres=gpu`` flags or "gpu" in the name, in Go's random map order).
"""

from __future__ import annotations

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.flavors import cpu_millis, memory_bytes

from . import pod_annotations
from .errors import PodRejected


def select_flavor(bc: pb.BuildConfig, name: str | None, gpus: int) -> pb.Flavor | None:
    """The flavor a pod gets: ``name`` (its annotation), else the first GPU flavor by name when it asks for
    ``gpus``, else the pool's default; None when the pool has no flavors (the annotation is then ignored, as
    on a pool of before)."""
    table = bc.flavors
    if not table:
        return None
    if name is not None:
        flavor = table.get(name.strip())
        if flavor is None:
            names = ", ".join(sorted(table))
            raise PodRejected(
                pod_annotations.field(pod_annotations.FLAVOR), f"no flavor {name!r} in this pool (its flavors: {names})"
            )
        return flavor
    if gpus > 0:
        for key in sorted(table):
            if table[key].gpu:
                return table[key]
    return table.get(bc.default_flavor) if bc.default_flavor else None


def apply_flavor(flavor: pb.Flavor | None, resources: pb.ResourceRequest, pod_flags: list[str]) -> list[str]:
    """Fill ``resources``' CPU and memory from ``flavor`` where the pod asks for none; return the backend flags:
    the flavor's first, so the pod's own (later: sbatch keeps the last) win where they conflict."""
    if flavor is None:
        return pod_flags
    # The site's table was checked when it was read (kernel.flavors.check_flavors): these parse.
    if not resources.cpu_millis and flavor.cpu_default:
        resources.cpu_millis = cpu_millis(flavor.cpu_default)
    if not resources.memory_bytes and flavor.memory_default:
        resources.memory_bytes = memory_bytes(flavor.memory_default)
    return [*flavor.backend_flags, *pod_flags]
