"""The pod's total resource request (pure, works on the pod dict); quantities are parsed by ``kernel.quantities``."""

from __future__ import annotations

import datetime
import math
from fractions import Fraction
from typing import Any, NamedTuple

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import quantities

from .errors import PodRejected
from .fields import as_obj, child, get_int, get_list, get_obj, member

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


def _quantity(raw: Any, where: str, kind: str, name: str) -> Fraction:
    """Quantity ``where.kind[name]`` (the path is only built for a rejection)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise PodRejected(member(f"{where}.{kind}", name), f"not a quantity: {raw!r}")
    text = raw if type(raw) is str else str(raw)
    try:
        return parse_quantity(text)
    except ValueError as e:
        raise PodRejected(member(f"{where}.{kind}", name), str(e)) from None


def container_resources(container: dict[str, Any], field: str) -> ContainerResources:
    """(cpu millis, memory bytes, gpus) of one container: max(request, limit) per resource,
    since a limit without a request implies request = limit and the batch system must grant the larger."""
    res = get_obj(container, "resources", field)
    if not res:
        return NO_RESOURCES  # most containers of batch pods: no Fraction arithmetic (~10 µs a render)
    rw = field + ".resources"
    for key in res:
        if key not in ("requests", "limits"):
            raise PodRejected(child(rw, key), "unsupported here (only requests and limits of cpu, memory, GPUs)")
    cpu: Fraction | int = 0
    mem: Fraction | int = 0
    gpu: Fraction | int = 0
    for kind in ("requests", "limits"):
        values = get_obj(res, kind, rw)
        for name, raw in values.items():
            if name not in KNOWN_RESOURCES:
                raise PodRejected(
                    member(f"{rw}.{kind}", name), "unsupported resource (only cpu, memory, nvidia.com/gpu)"
                )
            if name in IGNORED_RESOURCES:
                continue
            q = _quantity(raw, rw, kind, name)
            if q.numerator * (1000 if name == CPU else 1) > INT64_MAX * q.denominator:
                raise PodRejected(member(f"{rw}.{kind}", name), "too large")
            if name == CPU:
                cpu = max(cpu, q)
            elif name == MEMORY:
                mem = max(mem, q)
            else:
                if q.denominator != 1:
                    raise PodRejected(member(f"{rw}.{kind}", name), "GPU counts must be whole numbers")
                gpu = max(gpu, q)
    return ContainerResources(math.ceil(cpu * 1000), math.ceil(mem), int(gpu))


def pod_resources(pod: dict[str, Any]) -> pb.ResourceRequest:
    """What the whole pod needs at once: main containers run concurrently (summed), init containers run
    one at a time (max), the pod needs the larger of the two; activeDeadlineSeconds becomes the wall time."""
    spec = as_obj(pod.get("spec"), "spec")
    main = [
        container_resources(as_obj(c, f"spec.containers[{i}]"), f"spec.containers[{i}]")
        for i, c in enumerate(get_list(spec, "containers", "spec"))
    ]
    init = [
        container_resources(as_obj(c, f"spec.initContainers[{i}]"), f"spec.initContainers[{i}]")
        for i, c in enumerate(get_list(spec, "initContainers", "spec"))
    ]
    return pod_resources_from(main, init, spec)


def pod_resources_from(
    main: list[ContainerResources], init: list[ContainerResources], spec: dict[str, Any]
) -> pb.ResourceRequest:
    """pod_resources from per-container figures already computed (the renderer has them)."""
    # Plain loops over the three figures: this runs once per render, and generators over range(3) cost more.
    cpu = memory = gpus = 0
    for c in main:
        cpu, memory, gpus = cpu + c.cpu_millis, memory + c.memory_bytes, gpus + c.gpus
    for c in init:
        cpu, memory, gpus = max(cpu, c.cpu_millis), max(memory, c.memory_bytes), max(gpus, c.gpus)
    total = [cpu, memory, gpus]
    if max(total) > INT64_MAX:
        raise PodRejected("spec.containers", "the containers' resources add up to more than int64")
    if get_obj(spec, "resources", "spec"):  # pod-level resources (Kubernetes >= 1.32) bound the whole pod
        pod_level = container_resources(spec, "spec")
        total = [p if p else t for p, t in zip(pod_level, total, strict=True)]
    req = pb.ResourceRequest(cpu_millis=total[0], memory_bytes=total[1], gpus=total[2])
    deadline = get_int(spec, "activeDeadlineSeconds", "spec")
    if deadline is not None:
        if not 0 < deadline <= MAX_WALL_SECONDS:
            raise PodRejected("spec.activeDeadlineSeconds", f"must be a positive integer up to {MAX_WALL_SECONDS}")
        req.wall_time = datetime.timedelta(seconds=deadline)
    return req
