"""The pod's total resource request from its containers' figures (parsed by :mod:`.pod_parse`; quantities by
``kernel.quantities``)."""

from __future__ import annotations

import datetime
import functools
import math
from fractions import Fraction
from typing import NamedTuple

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import quantities

from .errors import Checked, PodRejected, checked

GPU_RESOURCE = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
# Resources we understand; anything else would be dropped silently, so it is rejected instead.
IGNORED_RESOURCES = frozenset({"ephemeral-storage"})
KNOWN_RESOURCES = frozenset({CPU, MEMORY, GPU_RESOURCE}) | IGNORED_RESOURCES
MAX_WALL_SECONDS = 315_576_000_000
"""10,000 years: the largest google.protobuf.Duration (and within datetime.timedelta)."""
INT64_MAX = 2**63 - 1
"""JobScript.resources are int64 (cpu millis, memory bytes, GPUs): larger figures are rejected, not wrapped."""


class ContainerResources(NamedTuple):
    """What one container needs: max(request, limit) per resource."""

    cpu_millis: int
    memory_bytes: int
    gpus: int


NO_RESOURCES = ContainerResources(0, 0, 0)
"""A container that requests nothing."""


def parse_quantity(text: str) -> Fraction:
    """A pod's quantity ("500m", "1Gi", "1e3"), exact; ValueError if malformed or negative."""
    value = quantities.parse(text)
    if value < 0:
        raise ValueError(f"negative quantity: {text!r}")
    return value


UNIT_CACHE_MAX_CHARS = 64
"""Longer quantity strings are converted uncached: a pod must not fill the cache with its own large strings."""


def resource_units(name: str, text: str) -> int:
    """Quantity ``text`` of resource ``name`` in the job's units, rounded up: cpu millis, memory bytes, GPUs.

    ValueError, with the reason a rejection gives: malformed or negative, larger than int64 in those units, or a
    GPU count that is not whole. The units are ints so that a container's max(request, limit) and the pod's sums
    need no Fraction arithmetic, which was most of parsing an interLink pod's resources.
    """
    if len(text) > UNIT_CACHE_MAX_CHARS:
        return _units(name, text)
    return _cached_units(name, text)


def _units(name: str, text: str) -> int:
    quantity = parse_quantity(text)
    scaled = quantity * 1000 if name == CPU else quantity
    if scaled > INT64_MAX:
        raise ValueError("too large")
    if name == GPU_RESOURCE and quantity.denominator != 1:
        raise ValueError("GPU counts must be whole numbers")
    return math.ceil(scaled)


_cached_units = functools.lru_cache(maxsize=1024)(_units)
"""A pool's pods ask for the same few figures ("100m", "64Mi"): each is converted once."""


def pod_resources_from(
    main: list[ContainerResources],
    init: list[ContainerResources],
    pod_level: Checked[ContainerResources | None],
    deadline: Checked[int | None],
) -> pb.ResourceRequest:
    """What the whole pod needs at once: main containers run concurrently (summed), init containers run one at a
    time (max), the pod needs the larger of the two, bounded by pod-level resources (Kubernetes >= 1.32) where
    they are given; activeDeadlineSeconds becomes the wall time."""
    # Plain loops over the three figures: this runs once per render, and generators over range(3) cost more.
    cpu = memory = gpus = 0
    for c in main:
        cpu, memory, gpus = cpu + c.cpu_millis, memory + c.memory_bytes, gpus + c.gpus
    for c in init:
        cpu, memory, gpus = max(cpu, c.cpu_millis), max(memory, c.memory_bytes), max(gpus, c.gpus)
    total = [cpu, memory, gpus]
    if max(total) > INT64_MAX:
        raise PodRejected("spec.containers", "the containers' resources add up to more than int64")
    pod_level = checked(pod_level)
    if pod_level is not None:
        total = [p if p else t for p, t in zip(pod_level, total, strict=True)]
    req = pb.ResourceRequest(cpu_millis=total[0], memory_bytes=total[1], gpus=total[2])
    deadline = checked(deadline)
    if deadline is not None:
        if not 0 < deadline <= MAX_WALL_SECONDS:
            raise PodRejected("spec.activeDeadlineSeconds", f"must be a positive integer up to {MAX_WALL_SECONDS}")
        req.wall_time = datetime.timedelta(seconds=deadline)
    return req
